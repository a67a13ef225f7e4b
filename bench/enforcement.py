"""What the enforcement costs in a real call: the same SDK call outside a run and inside runs with more limits.

One process, one instrumentation (a no-op tracer by default, so that only the enforcement differs between the
configurations; `--sdk` records spans to memory instead). Each repetition times a batch of calls in every
configuration in turn: outside any run, in a run with no limit at all (no repeat or stall check either), in a run
with only max_steps, and in a run with every limit (as `overhead.py` runs it). Prints the median batch and the
median of the paired differences to "outside a run".

Why it exists: the wrapper alone in a tight loop (`hot_path.py --kinds wrapper`) keeps the caches warm, and there a
budgeted run adds about 14 us to a call (no-op tracer); inside a real SDK call, whose own work evicts ours from the
caches, the same work added 43 us (December 5 2026). A cut should show here too.

`--icount` counts instructions instead (valgrind's callgrind): each configuration's calls N and 2N times in fresh
processes with one hash seed, the collector off while they run (a collection landing in one count and not the other
moved the difference by up to 6k instructions per call); the same code counted about 1.5k apart between runs, so a
cut of the enforcement shows when it is larger than that.

Run: `.venv/bin/python bench/enforcement.py [--kind plain|stream|usage] [--reps 40] [--calls 60] [--sdk] [--each]
[--icount]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from hot_path import _counted, _frozen_work_tree, budget, valgrind_events  # noqa: E402
from workload import CALLS, make_client  # noqa: E402


def configurations(otel_budget: Any, each: bool = False) -> dict[str, Any]:
    """Configuration name -> the budget of its run (None: outside any run); `each` adds a run per limit alone."""
    limits = otel_budget.Budget
    configs = {
        "outside a run": None,
        "run, no limit": limits(max_repeats=None, max_stalls=None),
        "run, max_steps only (repeat and stall checks on)": limits(max_steps=10**7),
    }
    if each:
        off = {"max_repeats": None, "max_stalls": None}
        configs.update({
            "run, repeat and stall checks only": limits(),
            "run, max_steps only (no repeat or stall check)": limits(max_steps=10**7, **off),
            "run, max_tool_calls only": limits(max_tool_calls=10**7, **off),
            "run, max_seconds only": limits(max_seconds=10**6, **off),
            "run, max_total_tokens only": limits(max_total_tokens=10**12, **off),
            "run, max_usd only": limits(max_usd=10**6, **off),
        })
    configs["run, every limit"] = budget(otel_budget)
    return configs


def batch(otel_budget: Any, fn: Any, client: Any, run_budget: Any, n: int) -> float:
    """us of process CPU per call over n calls (after one call to start the run)."""
    if run_budget is None:
        started = time.process_time()
        for _ in range(n):
            fn(client)
        return (time.process_time() - started) / n * 1e6
    with otel_budget.run("bench-enforcement", budget=run_budget):
        fn(client)
        started = time.process_time()
        for _ in range(n):
            fn(client)
        return (time.process_time() - started) / n * 1e6


def _one(kind: str, config: str, n: int, each: bool) -> None:
    """(Child of --icount) n calls in one configuration, after warm-up, with a no-op tracer and the collector off."""
    from opentelemetry.trace import NoOpTracerProvider

    import otel_budget

    otel_budget.instrument(tracer_provider=NoOpTracerProvider())
    client, fn = make_client(), CALLS[kind]
    run_budget = configurations(otel_budget, each)[config]
    for _ in range(20):
        fn(client)
    with otel_budget.run("bench-enforcement", budget=run_budget) if run_budget is not None else nullcontext():
        _counted(fn, client, n)


def icount(args: argparse.Namespace) -> None:
    """Instructions per call of each configuration and over "outside a run": (count of 2N - count of N) / N."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--icount needs valgrind (apt-get install valgrind)")
    import otel_budget

    names = list(configurations(otel_budget, args.each))
    env = _frozen_work_tree()
    n = args.calls

    def count(job: tuple[str, int]) -> int:
        argv = [__file__, "--one", job[0], str(job[1]), "--kind", args.kind, *(["--each"] if args.each else [])]
        return valgrind_events(argv, env)["Ir"]

    jobs = [(name, calls) for name in names for calls in (n, 2 * n)]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # each job is a process: one per core
        counts = dict(zip(jobs, pool.map(count, jobs), strict=True))
    per = {name: (counts[(name, 2 * n)] - counts[(name, n)]) / n for name in names}
    print(f"{args.kind} calls, instructions per call (callgrind, {n} and {2 * n} calls, no-op tracer, collector off)")
    print("| configuration | instructions/call | over outside a run |")
    print("|---|---:|---:|")
    for name, value in per.items():
        print(f"| {name} | {value:,.0f} | {value - per['outside a run']:+,.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--kind", default="plain", choices=["plain", "stream", "usage"])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--calls", type=int, default=None, help="calls per batch (60), or N of --icount (100)")
    ap.add_argument("--sdk", action="store_true", help="spans to an in-memory exporter (default: a no-op tracer)")
    ap.add_argument("--each", action="store_true", help="also a run per limit alone")
    ap.add_argument("--icount", action="store_true", help="count instructions (valgrind) instead of timing")
    ap.add_argument("--one", nargs=2, metavar=("CONFIG", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _one(args.kind, args.one[0], int(args.one[1]), args.each)
        return
    if args.icount:
        args.calls = args.calls or 100
        icount(args)
        return
    args.calls = args.calls or 60

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import NoOpTracerProvider

    import otel_budget

    exporter = InMemorySpanExporter()
    provider: Any = NoOpTracerProvider()
    if args.sdk:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_budget.instrument(tracer_provider=provider)
    client, fn = make_client(), CALLS[args.kind]
    configs = configurations(otel_budget, args.each)
    for _ in range(50):
        fn(client)
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.reps):
        for name, run_budget in configs.items():
            samples[name].append(batch(otel_budget, fn, client, run_budget, args.calls))
            exporter.clear()
    otel_budget.uninstrument()
    base = samples["outside a run"]
    print(f"{args.kind} calls, {args.reps} repetitions of {args.calls} calls, "
          f"{'spans to memory' if args.sdk else 'no-op tracer'}; us of process CPU per call")
    print("| configuration | median | paired difference to outside a run |")
    print("|---|---:|---:|")
    for name, values in samples.items():
        paired = statistics.median(v - b for v, b in zip(values, base, strict=True))
        print(f"| {name} | {statistics.median(values):.1f} | {paired:+.1f} |")


if __name__ == "__main__":
    main()
