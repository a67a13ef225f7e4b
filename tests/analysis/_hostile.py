"""Hostile span files: lines written by the real FileSpanExporter (one span a line), then edited the way an
attacker (or a damaged disk) would, and the real `otel-budget` command run on them as a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_budget import FileSpanExporter
from otel_budget.telemetry import semconv as sc

from ._spans import run_attributes

#: What must never reach a terminal: C0 but newline, DEL, C1, and bidirectional overrides.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def call_attributes(turn: int, tokens: int, usd: float, actions: Iterable[str] = ()) -> dict[str, Any]:
    """A model call span of ours (the assembler attaches it to the run span above it)."""
    return {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.OI_SPAN_KIND: sc.OI_KIND_LLM,
        sc.COST_SOURCE: "price_table",
        sc.TURN: turn,
        sc.GEN_AI_USAGE_INPUT_TOKENS: tokens,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: tokens // 10,
        sc.COST_USD: usd,
        sc.ACTIONS: list(actions),
    }


def write_trees(path: Path, trees: Iterable[tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[str]:
    """Each (run attributes, [model call attributes]) as a run span with its calls under it, one span a line;
    returns the lines."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for run, calls in trees:
        with tracer.start_as_current_span(f"invoke_agent {run[sc.GEN_AI_AGENT_NAME]}", attributes=run):
            for attrs in calls:
                with tracer.start_as_current_span("chat gpt-4o", attributes=attrs):
                    pass
    exporter = FileSpanExporter(path)
    for span in memory.get_finished_spans():
        exporter.export([span])
    exporter.shutdown()
    return path.read_text().splitlines()


def healthy(path: Path, name: str = "agent", runs: int = 3, usd: float = 0.01) -> list[str]:
    """`runs` runs that ended done, each with two model calls; returns the lines (calls first, then the run)."""
    return write_trees(path, [
        (run_attributes(name, "done", 2, 1, 1.0, 900, usd), [call_attributes(1, 400, usd / 2),
                                                              call_attributes(2, 500, usd / 2)])
        for _ in range(runs)
    ])


def forge(line: str, key: str, value: Any) -> str:
    """The line with attribute `key` of its span set to the OTLP/JSON AnyValue `value`, written by json.dumps as
    given (a float NaN becomes the bare `NaN` Python writes, which is not JSON)."""
    data = json.loads(line)
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    attrs = [kv for kv in span["attributes"] if kv["key"] != key]
    span["attributes"] = [*attrs, {"key": key, "value": value}]
    return json.dumps(data)


def run_line(lines: list[str]) -> int:
    """The index of the first run span's line."""
    return next(i for i, line in enumerate(lines) if "invoke_agent" in line)


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, as every other JSON reader does."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def otel_budget(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real command, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "otel_budget.cli", *args], capture_output=True, encoding="utf-8",
                          timeout=timeout, env=env)
