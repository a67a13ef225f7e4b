"""Run spans with known values, written by the real FileSpanExporter (no model calls needed)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_budget import FileSpanExporter
from otel_budget.telemetry import semconv as sc


def run_attributes(name: str, reason: str, steps: float, tool_calls: float, seconds: float, tokens: float,
                   usd: float, limit: str | None = None) -> dict:
    attrs = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
        sc.GEN_AI_AGENT_NAME: name,
        sc.STOP_REASON: reason,
        sc.USED_PREFIX + "steps": int(steps),
        sc.USED_PREFIX + "tool_calls": int(tool_calls),
        sc.USED_PREFIX + "seconds": float(seconds),
        sc.USED_PREFIX + "input_tokens": int(tokens) - int(tokens) // 10,
        sc.USED_PREFIX + "output_tokens": int(tokens) // 10,
        sc.USED_PREFIX + "total_tokens": int(tokens),
        sc.USED_PREFIX + "usd": float(usd),
    }
    if limit:
        attrs[sc.STOP_LIMIT] = limit
    return attrs


def write_runs(path: Path, runs: Iterable[dict], batch: int = 100) -> list[str]:
    """One run span per attribute dict (plus a model call span under each), in OTLP/JSON lines of `batch`
    spans; returns the trace ids in order."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    trace_ids = []
    for attrs in runs:
        with tracer.start_as_current_span(f"invoke_agent {attrs[sc.GEN_AI_AGENT_NAME]}", attributes=attrs) as span:
            with tracer.start_as_current_span("chat gpt-4o", attributes={sc.GEN_AI_OPERATION_NAME: "chat"}):
                pass
            trace_ids.append(format(span.get_span_context().trace_id, "032x"))
    spans = memory.get_finished_spans()
    exporter = FileSpanExporter(path)
    for i in range(0, len(spans), batch):
        exporter.export(spans[i : i + batch])
    exporter.shutdown()
    return trace_ids
