"""Shared fixtures for the framework tests: a running ScriptedLLM and instrumentation with in-memory spans."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget
from otel_budget.testing import ScriptedLLM

# LiteLLM fetches its price table from the network at import unless told to use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """A started ScriptedLLM on loopback, stopped after the test."""
    with ScriptedLLM() as llm:
        yield llm


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    """An SDK tracer provider, shut down after the test."""
    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def otel(tracer_provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """`otel_budget.instrument()` with spans kept in memory; `uninstrument()` after the test."""
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_budget.instrument(tracer_provider=tracer_provider)
    try:
        yield exporter
    finally:
        otel_budget.uninstrument()


@pytest.fixture
def instrument_with(otel: InMemorySpanExporter, tracer_provider: TracerProvider) -> Callable[..., None]:
    """Call `instrument()` again with more settings (prices, a default budget), keeping the span exporter."""

    def again(**kwargs: Any) -> None:
        otel_budget.instrument(tracer_provider=tracer_provider, **kwargs)

    return again
