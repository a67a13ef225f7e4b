"""What the stall check costs per call: reading the newest tool results a request carries.

A budgeted run sends chat requests shaped like a tool loop's: a history of `--history` messages ending with
an assistant turn and `--results` fresh tool messages (new call ids and contents every call, so every result
is read, signed and counted). Configurations alternate in rounds: the bare SDK (baseline), otel-budget with
the stall check off (`max_stalls=None`) and on (the default). Same in-process transport and CPU clock as
`overhead.py`. Prints a table (median microseconds per call) and writes it to bench/stalls-results.md.
Run: `.venv/bin/python bench/stalls.py [--rounds N] [--calls N]`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import overhead  # noqa: E402 - the canned transport and client of the overhead benchmark

import otel_budget  # noqa: E402

BUDGET = dict(max_steps=10**7, max_usd=10**6, max_total_tokens=10**12)


def history(n: int) -> list[dict[str, Any]]:
    """A tool loop's conversation so far: n messages, alternating assistant tool calls and their results."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are Ledger."},
                                 {"role": "user", "content": "Collect the open invoices."}]
    for i in range(max(0, n - 2) // 2):
        out.append({"role": "assistant", "tool_calls": [{"id": f"h{i}", "type": "function", "function": {
            "name": "read_invoice", "arguments": f'{{"invoice_id": "INV-2026-{i:04d}"}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"h{i}", "content": f"INVOICE INV-2026-{i:04d} total 1{i}.00"})
    return out


def requests(base: list[dict[str, Any]], results: int, count: int, tag: str) -> list[list[dict[str, Any]]]:
    """`count` requests: the history, an assistant turn asking for `results` tools, and their fresh results."""
    out = []
    for k in range(count):
        ids = [f"{tag}{k}_{j}" for j in range(results)]
        turn = {"role": "assistant", "tool_calls": [{"id": i, "type": "function", "function": {
            "name": f"tool_{j}", "arguments": f'{{"page": {k}}}'}} for j, i in enumerate(ids)]}
        tail = [{"role": "tool", "tool_call_id": i, "content": f"page {k} of tool {j}: " + "row " * 200}
                for j, i in enumerate(ids)]
        out.append([*base, turn, *tail])
    return out


def timed(client: Any, bodies: list[list[dict[str, Any]]]) -> float:
    """Mean microseconds of this thread's CPU time per call."""
    start = time.thread_time_ns()
    for messages in bodies:
        client.chat.completions.create(model=overhead.MODEL, messages=messages)
    return (time.thread_time_ns() - start) / len(bodies) / 1000


def measure(n_rounds: int, calls: int, n_history: int, n_results: int) -> dict[str, list[float]]:
    client = overhead.make_client()
    base = history(n_history)
    configs: list[tuple[str, int | None, bool]] = [
        ("baseline (no instrumentation)", None, False),
        ("otel-budget, stall check off", None, True),
        ("otel-budget, stall check on", 3, True),
    ]
    samples: dict[str, list[float]] = {}
    for r in range(n_rounds):
        for name, stalls, instrumented in configs[r % 3:] + configs[: r % 3]:
            bodies = requests(base, n_results, calls + 5, f"r{r}")
            if instrumented:
                otel_budget.instrument()
            try:
                if instrumented:
                    with otel_budget.run("bench", budget=otel_budget.Budget(**BUDGET, max_stalls=stalls)):
                        timed(client, bodies[:5])
                        samples.setdefault(name, []).append(timed(client, bodies[5:]))
                else:
                    timed(client, bodies[:5])
                    samples.setdefault(name, []).append(timed(client, bodies[5:]))
            finally:
                if instrumented:
                    otel_budget.uninstrument()
    return samples


def direct(n_results: int, histories: tuple[int, ...] = (20, 200, 2000), count: int = 2000) -> list[tuple[int, float]]:
    """Microseconds the run spends reading one request's newest results (`RunNode.read_results`), by history."""
    out = []
    for n in histories:
        bodies = [{"messages": m} for m in requests(history(n), n_results, count, f"d{n}_")]
        with otel_budget.run("bench-direct", budget=otel_budget.Budget(max_steps=10**7)) as run:
            node = run.node
            start = time.thread_time_ns()
            for body in bodies:
                node.read_results(body, "messages")
            out.append((n, (time.thread_time_ns() - start) / count / 1000))
    return out


def report(samples: dict[str, list[float]], args: argparse.Namespace,
           reads: list[tuple[int, float]] | None = None) -> str:
    med = {name: statistics.median(v) for name, v in samples.items()}
    base, off, on = med["baseline (no instrumentation)"], med["otel-budget, stall check off"], \
        med["otel-budget, stall check on"]
    lines = [
        "# Stall check: per-call cost of reading the newest tool results",
        "",
        f"Python {platform.python_version()}, {platform.machine()}; {args.rounds} rounds, configurations "
        f"alternated; {args.calls} chat calls per configuration and round, each carrying a {args.history}-message "
        f"history plus {args.results} fresh tool results (~1 KB each); in-process httpx2.MockTransport; CPU time "
        "of the calling thread; median of the rounds.",
        "",
        "| configuration | us/call | vs baseline |",
        "|---|---|---|",
    ]
    for name, value in med.items():
        lines.append(f"| {name} | {value:.0f} | {value / base:.3f}x |")
    lines += [
        "",
        f"The stall check adds {on - off:.1f} us per call ({(on - off) / base * 100:.1f}% of the bare call, "
        f"{(on - off) / max(off - base, 1e-9) * 100:.1f}% of otel-budget's own overhead); ratio on/off "
        f"{on / off:.3f}.",
    ]
    if reads:
        lines += ["", f"The read itself (`RunNode.read_results`, {args.results} fresh results a request, 2,000 "
                  "requests; it reads only the messages after the last assistant turn):", "",
                  "| history (messages) | us/request | share of the bare call |", "|---:|---:|---:|"]
        lines += [f"| {n:,} | {us:.1f} | {us / base * 100:.2f}% |" for n, us in reads]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--history", type=int, default=20, help="messages before the newest turn")
    parser.add_argument("--results", type=int, default=3, help="tool results in each request's newest turn")
    args = parser.parse_args(argv)
    text = report(measure(args.rounds, args.calls, args.history, args.results), args, direct(args.results))
    print(text)
    (Path(__file__).parent / "stalls-results.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
