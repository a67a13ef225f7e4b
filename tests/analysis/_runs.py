"""Span files of REAL runs: the invoice agent (the real openai SDK) against ScriptedLLM, written by the real
FileSpanExporter. A scenario is (stuck portal?, Budget); every run is named "invoice-agent"."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_budget
from otel_budget.demo.agent import Portal, scripted_model, solve
from otel_budget.testing import RecordedRequest, ScriptedLLM, Turn

NAME = "invoice-agent"
HEALTHY_STEPS = 10  # open, 3 reads, next, 3 reads, submit, the final answer
SUMMARY = "The agent read page 1 and could not get past it."


def _model(request: RecordedRequest) -> Turn:
    if "tools" not in request.body:  # the one tool-less call of a model-written wrap-up
        return Turn(text=SUMMARY, output_tokens=12)
    return scripted_model(request)


def record_runs(path: Path, scenarios: Iterable[tuple[bool, otel_budget.Budget]], *,
                capture_content: bool = False) -> list[otel_budget.RunOutcome]:
    """Run each scenario once, spans appended to `path` as OTLP/JSON lines; returns the outcomes in order."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(otel_budget.FileSpanExporter(path)))
    otel_budget.instrument(tracer_provider=provider, capture_content=capture_content)
    outcomes = []
    try:
        with ScriptedLLM() as llm:
            llm.responder = _model
            client = openai.OpenAI(base_url=llm.openai_base_url, api_key="offline", max_retries=0)
            for stuck, budget in scenarios:
                with otel_budget.run(NAME, budget=budget) as run:
                    solve(client, Portal(stuck=stuck))
                assert run.outcome is not None
                outcomes.append(run.outcome)
        provider.force_flush()
    finally:
        otel_budget.uninstrument()
        provider.shutdown()
    return outcomes
