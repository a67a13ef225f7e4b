"""What carrying a run into threads costs: `ThreadPoolExecutor.submit` and `Thread.start`, bare, instrumented
outside any run, and inside a run (where the caller's context is copied).

One process, configurations alternated in rounds; thread CPU time of the submitting thread (`time.thread_time_ns`),
median of the rounds. Prints a table and writes it to bench/threads-results.md.
Run: `.venv/bin/python bench/threads.py [--rounds N] [--submits N] [--starts N]`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path

import otel_budget


def _noop() -> None:
    return None


def _submits(pool: ThreadPoolExecutor, n: int) -> float:
    """Microseconds of the caller's CPU per submit (the tasks are waited for outside the timing)."""
    start = time.thread_time_ns()
    futures = [pool.submit(_noop) for _ in range(n)]
    spent = time.thread_time_ns() - start
    wait(futures)
    return spent / n / 1000


def _starts(n: int) -> float:
    """Microseconds of the caller's CPU per Thread.start (joined outside the timing)."""
    threads = [threading.Thread(target=_noop) for _ in range(n)]
    start = time.thread_time_ns()
    for t in threads:
        t.start()
    spent = time.thread_time_ns() - start
    for t in threads:
        t.join()
    return spent / n / 1000


CONFIGS: dict[str, tuple[bool, bool]] = {  # name -> (instrumented, inside a run)
    "bare (not instrumented)": (False, False),
    "instrumented, outside a run": (True, False),
    "instrumented, inside a run": (True, True),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--submits", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {c: {"submit": [], "start": []} for c in CONFIGS}
    names = list(CONFIGS)
    with ThreadPoolExecutor(4) as pool:
        wait([pool.submit(_noop) for _ in range(8)])  # workers up before timing
        for r in range(args.rounds):
            for name in names[r % 3:] + names[: r % 3]:
                instrumented, inside = CONFIGS[name]
                if instrumented:
                    otel_budget.instrument()
                scope = otel_budget.run("bench", budget=otel_budget.Budget(max_steps=10)) if inside else nullcontext()
                with scope:
                    results[name]["submit"].append(_submits(pool, args.submits))
                    results[name]["start"].append(_starts(args.starts))
                otel_budget.uninstrument()
    base = {k: statistics.median(v) for k, v in results[names[0]].items()}
    lines = [
        "# Carrying a run into threads: cost per submit / start",
        "",
        f"Python {platform.python_version()}, {platform.machine()}; {args.rounds} rounds, configurations alternated; "
        f"{args.submits} submits and {args.starts} Thread.start per configuration and round. Microseconds of the "
        "submitting thread's CPU time (time.thread_time_ns), median of the rounds; ratio against bare in the same run.",
        "",
        "| configuration | submit us | ratio | Thread.start us | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        sub, st = statistics.median(results[name]["submit"]), statistics.median(results[name]["start"])
        lines.append(f"| {name} | {sub:.2f} | {sub / base['submit']:.2f} | {st:.1f} | {st / base['start']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (Path(__file__).parent / "threads-results.md").write_text(text)


if __name__ == "__main__":
    main()
