"""The openai hot path, before and after a change, in one process: the bare SDK, otel-budget as checked out and
(with `--base DIR`) an older copy of the package imported as `otel_budget_base`, alternated many times.

Make the older copy with `git archive <commit> otel_budget | tar -x -C DIR && mv DIR/otel_budget
DIR/otel_budget_base` (the package imports itself relatively, so it runs under the other name). Each repetition
times the bare SDK, the otel-budget configurations in shuffled order (each instrumented alone, inside a budgeted
run with every limit on, as `overhead.py` runs it), then the bare SDK again; a slot's time is the fastest of a few
short batches (process CPU time), so a burst of the shared machine's load rarely reaches the figures. Reports the
medians of the paired overheads and of the per-repetition difference against the base. Prints a table; writes nothing.
Run: `.venv/bin/python bench/hot_openai.py --base /tmp/base [--reps 30]`.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).parent))
from workload import CALLS, make_client, timed  # noqa: E402

LIMITS = dict(max_steps=10**7, max_tool_calls=10**7, max_seconds=10**6, max_input_tokens=10**12,
              max_output_tokens=10**12, max_total_tokens=10**12, max_usd=10**6)


class Slot:
    """One configuration: the package it instruments with (None: the bare SDK), its own exporter and client."""

    def __init__(self, name: str, package: ModuleType | None) -> None:
        self.name = name
        self.package = package
        self.exporter = InMemorySpanExporter()
        self.tp = TracerProvider()
        self.tp.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.client = make_client()

    @contextmanager
    def on(self) -> Iterator[None]:
        pkg = self.package
        if pkg is None:
            yield
            return
        pkg.instrument(tracer_provider=self.tp)
        try:
            with pkg.run("bench", budget=pkg.Budget(**LIMITS)):
                yield
        finally:
            pkg.uninstrument()

    def time(self, kind: str, n: int, batches: int) -> float:
        """The fastest of `batches` batches of n calls (the one the machine's other load disturbed least)."""
        with self.on():
            fn = CALLS[kind]
            timed(fn, self.client, 3)
            self.exporter.clear()
            us = min(timed(fn, self.client, n) for _ in range(batches))
            if self.package is not None and not self.exporter.get_finished_spans():
                raise SystemExit(f"{self.name}: no spans were recorded")
            self.exporter.clear()
        return us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="a directory holding an older copy of the package as otel_budget_base")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--plain", type=int, default=30, help="non-streamed calls per batch")
    parser.add_argument("--stream", type=int, default=8, help="20-chunk streams per batch")
    parser.add_argument("--batches", type=int, default=5, help="batches per slot; the fastest counts")
    parser.add_argument("--kinds", default="plain,stream")
    args = parser.parse_args()
    import otel_budget

    slots = [Slot("ours", otel_budget)]
    if args.base:
        sys.path.insert(0, args.base)
        slots.append(Slot("base", importlib.import_module("otel_budget_base")))
    bare = Slot("bare", None)
    kinds = args.kinds.split(",")
    n = {"plain": args.plain, "stream": args.stream}
    over: dict[tuple[str, str], list[float]] = {(s.name, k): [] for s in slots for k in kinds}
    best: dict[tuple[str, str], float] = {}
    vs_base: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.reps):
        for kind in kinds:
            first = bare.time(kind, n[kind], args.batches)
            order = random.sample(slots, len(slots))
            got = {s.name: s.time(kind, n[kind], args.batches) for s in order}
            last = bare.time(kind, n[kind], args.batches)
            ref = (first + last) / 2
            best[("bare", kind)] = min(best.get(("bare", kind), 1e18), first, last)
            for name, us in got.items():
                over[(name, kind)].append(us - ref)
                best[(name, kind)] = min(best.get((name, kind), 1e18), us)
            if "base" in got:
                vs_base[kind].append(got["ours"] - got["base"])
    print(f"{args.reps} repetitions; us of process CPU per call")
    print("| config | call | paired overhead (median) | min-to-min overhead |")
    print("|---|---|---:|---:|")
    for kind in kinds:
        for s in slots:
            print(f"| {s.name} | {kind} | {statistics.median(over[(s.name, kind)]):+.1f} | "
                  f"{best[(s.name, kind)] - best[('bare', kind)]:+.1f} |")
    if args.base:
        for kind in kinds:
            print(f"ours - base, {kind}: median {statistics.median(vs_base[kind]):+.1f} us/call")


if __name__ == "__main__":
    main()
