"""Shared fixtures: a global in-memory tracer (so SDK-emitted spans are seen too), ScriptedLLM, SDK clients."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import anthropic
import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget
from otel_budget.testing import ScriptedLLM

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)  # global: the anthropic SDK's own spans would land here too


class Telemetry(SimpleNamespace):
    exporter: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def spans(self, name_prefix: str = "") -> list:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_prefix)]

    def chat_spans(self) -> list:
        return [s for s in self.exporter.get_finished_spans() if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]

    def run_span(self, name: str):
        found = self.spans(f"invoke_agent {name}")
        assert len(found) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return found[0]

    def metric_points(self, name: str) -> list:
        data = self.metrics.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        out.extend(m.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """instrument() with the global in-memory tracer and a fresh metric reader; uninstrument() after."""
    _EXPORTER.clear()
    reader = InMemoryMetricReader()
    otel_budget.instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    yield Telemetry(exporter=_EXPORTER, metrics=reader)
    otel_budget.uninstrument()


@pytest.fixture
def otel_oi() -> Iterator[Telemetry]:
    """As `otel`, with the OpenInference twins asked for (instrument(openinference=True))."""
    _EXPORTER.clear()
    reader = InMemoryMetricReader()
    otel_budget.instrument(meter_provider=MeterProvider(metric_readers=[reader]), openinference=True)
    yield Telemetry(exporter=_EXPORTER, metrics=reader)
    otel_budget.uninstrument()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def oai(llm: ScriptedLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)


@pytest.fixture
def aoai(llm: ScriptedLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)


@pytest.fixture
def anth(llm: ScriptedLLM) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)


@pytest.fixture
def aanth(llm: ScriptedLLM) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=llm.anthropic_base_url, api_key="test", max_retries=0)

