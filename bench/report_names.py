"""How long `otel-budget report` takes on a trace file with many run names: the text report against the HTML page.

Writes N runs (default 2,000, one name each, three stop reasons, costs spread over three orders of magnitude)
through the real FileSpanExporter, then times `otel-budget report FILE` and `otel-budget report FILE --html PAGE`
as subprocesses (wall clock, best of `--reps`). The page groups its plots beyond a handful of names, so it should
take about as long as the text report (plus matplotlib's import and three PNGs).

Run: `.venv/bin/python bench/report_names.py [--names 2000] [--reps 3]` (prints only).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_budget import FileSpanExporter
from otel_budget.telemetry import semconv as sc

REASONS = ("done", "steps", "cost")


def write(path: Path, names: int) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(names):
        attrs = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: f"task-{i:05d}",
            sc.STOP_REASON: REASONS[i % 3],
            sc.USED_PREFIX + "steps": 3 + i % 17,
            sc.USED_PREFIX + "total_tokens": 1000 + 37 * i,
            sc.USED_PREFIX + "usd": 0.001 * (1 + i % 1000),
        }
        with tracer.start_as_current_span(f"invoke_agent task-{i:05d}", attributes=attrs):
            pass
    exporter = FileSpanExporter(path)
    spans = memory.get_finished_spans()
    for i in range(0, len(spans), 200):
        exporter.export(spans[i : i + 200])
    exporter.shutdown()


def best(cmd: list[str], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "otel_budget.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        spans = Path(tmp) / "runs.jsonl"
        write(spans, args.names)
        text = best([*cli, "report", str(spans)], args.reps)
        page = best([*cli, "report", str(spans), "--html", str(Path(tmp) / "report.html")], args.reps)
    print(f"{args.names} run names: text report {text:.2f} s, HTML page {page:.2f} s (best of {args.reps})")


if __name__ == "__main__":
    main()
