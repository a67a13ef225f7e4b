"""Per-call overhead of otel-budget in a budgeted run against the bare openai SDK and each peer instrumentation.

Repetitions of: the bare SDK, every other configuration in shuffled order (each instrumented alone, see
peers.py), the bare SDK again; each slot times non-streamed calls, 20-chunk streams, and 20-chunk streams whose
caller asks for usage (the like-for-like stream comparison: see VERDICT_KINDS), in process CPU time
(workload.py). Per configuration: the median of its paired overheads (minus the mean of the two bare
measurements of the same repetition) and its min-to-min overhead. Prints the table and rewrites its own section
of bench/results.md. Run: `make bench`, or `.venv/bin/python bench/overhead.py [--reps N] [--fast]`.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import flatness  # noqa: E402
import openai  # noqa: E402
from peers import BARE, OURS, PEERS, Config, Slot, Worker, leftovers, probe, snapshot  # noqa: E402
from sections import write_section  # noqa: E402
from workload import STREAM_CHUNKS  # noqa: E402

HEADING = "# otel-budget overhead per call"
KINDS = {"plain": "non-streamed", "stream": f"streamed ({STREAM_CHUNKS} chunks)",
         "usage": f"streamed, usage asked by the caller ({STREAM_CHUNKS} chunks)"}
#: The kinds the verdict is given on. In `stream` the caller does not ask for usage: otel-budget asks for it (inside
#: a run a stream must report its usage) and hides it, while the peers record no token counts at all. `usage` is
#: the like-for-like comparison: the caller asks, every configuration gets the same events and records the tokens.
VERDICT_KINDS = ("plain", "stream")


class InProcess:
    """A configuration timed in this process: instrumented for its slot, then uninstrumented and checked."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.slot = Slot(config)

    def run(self, batches: dict[str, int]) -> dict[str, float]:
        before = snapshot()
        with self.slot.on():
            out = {kind: self.slot.time(kind, n) for kind, n in batches.items()}
        if left := leftovers(before):
            raise SystemExit(f"{self.config.name}: uninstrument left {left} patched")
        return out


class InWorker:
    """A configuration whose uninstrument leaves the SDK patched: timed in its own process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.worker = Worker(config)

    def run(self, batches: dict[str, int]) -> dict[str, float]:
        return {kind: self.worker.time(kind, n) for kind, n in batches.items()}


def measure(reps: int, batches: dict[str, int], seed: int) -> tuple[dict[str, dict[str, list[float]]], list[str]]:
    """Samples[config][kind] (us per call; the bare SDK twice per repetition) and notes on how each was run."""
    notes, runners = [], {}
    for config in [OURS, *PEERS]:
        if not config.available():
            notes.append(f"{config.name}: skipped, `{config.module}` is not installed (`pip install -e .[bench]`).")
            continue
        left = probe(config)
        if left:
            notes.append(f"{config.name}: its uninstrument leaves {len(left)} SDK attributes patched "
                         f"(e.g. `{left[0]}`), so it ran in a process of its own.")
            runners[config.name] = InWorker(config)
        else:
            runners[config.name] = InProcess(config)
    for note in notes:
        print(note, file=sys.stderr)
    bare = InProcess(BARE)
    rng = random.Random(seed)
    samples: dict[str, dict[str, list[float]]] = {}
    for rep in range(reps):
        order = list(runners)
        rng.shuffle(order)
        for name, runner in [(BARE.name, bare), *((n, runners[n]) for n in order), (BARE.name, bare)]:
            for kind, us in runner.run(batches).items():
                samples.setdefault(name, {}).setdefault(kind, []).append(us)
        print(f"  repetition {rep + 1}/{reps}", file=sys.stderr)
    for runner in runners.values():
        if isinstance(runner, InWorker):
            runner.worker.close()
    return samples, notes


def overheads(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, tuple[float, float]]]:
    """(median of paired overheads, min-to-min overhead) per configuration and call kind."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for name, by_kind in samples.items():
        if name == BARE.name:
            continue
        for kind, values in by_kind.items():
            bare = samples[BARE.name][kind]
            paired = [v - (bare[2 * i] + bare[2 * i + 1]) / 2 for i, v in enumerate(values)]
            out.setdefault(name, {})[kind] = (statistics.median(paired), min(values) - min(bare))
    return out


def report(samples: dict[str, dict[str, list[float]]], notes: list[str], flat: list[tuple[int, int, float]],
           wrapper: list[tuple[int, float]], args: argparse.Namespace) -> str:
    over = overheads(samples)
    peers = [c.name for c in PEERS if c.name in over]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        HEADING, "",
        f"`bench/overhead.py`: openai {openai.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} cores; load average {load} (1/5/15 min) at the end. "
        f"{args.reps} repetitions of: the bare SDK, the other configurations in shuffled order (each instrumented "
        f"alone), the bare SDK again; each slot times {args.calls} non-streamed calls, {args.streams} "
        f"{STREAM_CHUNKS}-chunk streams and {args.streams} such streams whose caller asks for usage "
        "(`stream_options.include_usage`), after 3 warm-up calls. In-process `httpx2.MockTransport` (no sockets), "
        "spans to an `InMemorySpanExporter` through a `SimpleSpanProcessor`, no MeterProvider; content capture "
        "off everywhere (OpenInference `hide_inputs/hide_outputs`, OpenLLMetry `TRACELOOP_TRACE_CONTENT=false`). "
        "Process CPU time (`time.process_time_ns`), microseconds per call. otel-budget runs inside "
        "`otel_budget.run(budget=Budget(...))` with every limit set (steps, tool calls, seconds, input/output/total "
        "tokens, USD) and the default repeat and stall checks.",
        "",
        "*Paired*: median over repetitions of (configuration - mean of that repetition's two bare measurements). "
        "*Min-to-min*: fastest batch of the configuration - fastest bare batch. *x best peer*: our overhead / the "
        "lowest peer overhead on the same figure (the goal is 0.5 or less).",
        "",
    ]
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    lines += ["| configuration | call | us/call (median) | paired overhead | min-to-min overhead |",
              "|---|---|---:|---:|---:|"]
    for kind, label in KINDS.items():
        if kind not in samples[BARE.name]:
            continue
        lines.append(f"| {BARE.name} | {label} | {statistics.median(samples[BARE.name][kind]):.0f} | | |")
        for name in [OURS.name, *peers]:
            if name in over:
                paired, m2m = over[name][kind]
                lines.append(f"| {name} | {label} | {statistics.median(samples[name][kind]):.0f} | "
                             f"{paired:+.0f} | {m2m:+.0f} |")
    if peers and OURS.name in over:
        lines += ["", "| call | figure | ours | best peer | x best peer |", "|---|---|---:|---:|---:|"]
        ratios = []
        for kind, label in KINDS.items():
            if kind not in over[OURS.name]:
                continue
            for i, figure in enumerate(("paired", "min-to-min")):
                best = min(peers, key=lambda n: over[n][kind][i])
                ours, theirs = over[OURS.name][kind][i], over[best][kind][i]
                ratio = f"{ours / theirs:.2f}" if theirs > 0 else "n/a"
                if kind in VERDICT_KINDS:
                    ratios.append(ours / theirs if theirs > 0 else math.inf)
                lines.append(f"| {label} | {figure} | {ours:+.0f} | {theirs:+.0f} ({best}) | {ratio} |")
        highest = (f"highest ratio {max(ratios):.2f}" if max(ratios) != math.inf
                   else "a peer measured no overhead on one figure: the host is too noisy to judge")
        lines += ["", f"At or below the best peer on all four figures (non-streamed, streamed): "
                  f"{'yes' if max(ratios) <= 1 else 'no'} ({highest}); half of it (0.5): "
                  f"{'yes' if max(ratios) <= 0.5 else 'no'}. The streams whose caller asks for usage are the "
                  "like-for-like comparison (the peers record no tokens of a stream that did not ask), shown apart."]
    lines += ["", f"### From turn 1 to turn {flat[-1][1]:,}", "",
              f"One budgeted run of {flat[-1][1]:,} non-streamed calls (after a warm-up run); in each stretch, chunks "
              "of 10 metered calls alternate with 10 bare calls made at the same point (median of the chunks' "
              "overheads).", "", "| turns | overhead us/call |", "|---|---:|"]
    lines += [f"| {a:,}-{b:,} | {o:+.0f} |" for a, b, o in flat]
    lines += ["", "The wrapper alone in one budgeted run (the SDK's request replaced by a function returning a parsed "
              f"completion; span, admission, pricing, settlement included), median of {args.windows} windows of 200 "
              "calls:", "",
              "| turn | us/call |", "|---:|---:|"]
    lines += [f"| {mark:,} | {us:.1f} |" for mark, us in wrapper]
    values = [us for _, us in wrapper]
    spread = max(values) / min(values) - 1
    lines += ["", f"Spread: the slowest mark {spread:.1%} above the fastest (flat means within 5%: "
              f"{'yes' if spread <= 0.05 else 'no'})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--calls", type=int, default=100, help="non-streamed calls per slot")
    parser.add_argument("--streams", type=int, default=40, help="streamed calls per slot")
    parser.add_argument("--windows", type=int, default=15, help="windows per mark of the wrapper-alone check")
    parser.add_argument("--run-length", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--fast", action="store_true", help="a smoke run: 2 repetitions, short batches and runs")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    args = parser.parse_args(argv)
    if args.fast:
        args.reps, args.calls, args.streams, args.run_length, args.windows = 2, 5, 3, 300, 2
    samples, notes = measure(args.reps, {"plain": args.calls, "stream": args.streams, "usage": args.streams}, args.seed)
    flat = flatness.stretches(args.run_length)
    marks = (1, 100, 10_000, 100_000) if not args.fast else (1, 100)
    wrapper = flatness.wrapper_alone(marks, reps=args.windows)
    text = report(samples, notes, flat, wrapper, args)
    print(text)
    if not args.fast:
        write_section(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
