"""Where otel-budget's per-call time goes, non-streamed and streamed, in the budgeted run `overhead.py` times.

cProfile runs the calls inside the run; a function's self time counts as ours in the share of its calls that
come from otel-budget's code (followed through any depth of callers), except the SDK's own work that we only
pass through: the wrapped `request` our guard sends, and the SDK stream our stream proxy reads. cProfile adds a
fixed cost to every function call, so code made of many small calls looks dearer than it is: read the shares
and the order, not the microseconds. wrapt's C wrapper is invisible to cProfile and is timed apart.
Rewrites its own section of bench/results.md. Run: `.venv/bin/python bench/profile_calls.py [--calls N]`.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import sys
import time
from pathlib import Path
from typing import Any

import wrapt

sys.path.insert(0, str(Path(__file__).parent))
from peers import OURS, Slot  # noqa: E402
from sections import write_section  # noqa: E402
from workload import CALLS, STREAM_CHUNKS  # noqa: E402

HEADING = "## Where otel-budget's time goes (`bench/profile_calls.py`)"
ROOT = Path(__file__).resolve().parent.parent  # the work tree (an editable install imports the package from it)
Func = tuple[str, int, str]

#: (what it is for, pattern on "path:function"); the first match wins.
CATEGORIES = [
    ("request-size measurement (JSON of the body)",
     r"^otel_budget/instrumentation/providers/_wire\.py:(body_chars|__call__|sent|measure|hand_off)"),
    ("span attributes (OTel SDK)",
     r"^opentelemetry/(sdk/trace/__init__\.py:(set_attributes?|_check_span_ended)|attributes/)"),
    ("span start (OTel SDK)", r"^opentelemetry/(sdk/trace/(__init__\.py:(start_span|__init__|start|_new_span)|"
     r"sampling\.py|id_generator\.py)|trace/(span\.py|__init__\.py:start_span)|sdk/util/)"),
    ("span end and export (OTel SDK)", r"^opentelemetry/sdk/trace/(__init__\.py|export/)"),
    ("OTel context lookups (current span, context)", r"^opentelemetry/(context|trace)/"),
    ("metrics (no-op API here)", r"^opentelemetry/(metrics|sdk/metrics)/"),
    ("other OpenTelemetry", r"^opentelemetry/"),
    ("pricing", r"^(otel_budget/core/pricing\.py|genai_prices/)"),
    ("stall and repeat checks", r"^otel_budget/(core|model)/[a-z_]+\.py:(read_results|note_results|_check_cycle|_cycle|"
     r"record_tool_requests|_prompt_shape|_digest|take_call_id|repeat_limit|stall_limit|canonical_arguments)"),
    ("admission and settlement (node.py, ledger.py)",
     r"^otel_budget/(core/(?!calls|tools|run|pricing|config|wrapup)[a-z_]+|model/budget)\.py:"),
    ("span attributes, our side (telemetry.py)", r"^otel_budget/telemetry/"),
    ("call record, guard, settle (calls.py)", r"^otel_budget/(core/calls|model/call)\.py:"),
    ("stream proxy (_stream.py)", r"^otel_budget/instrumentation/providers/_stream\.py:"),
    ("openai adapter (openai.py)", r"^otel_budget/instrumentation/providers/openai\.py:"),
    ("wrapper and request plumbing (_request.py, _params, _peers, config)", r"^otel_budget/"),
    ("locks", r"^(~:<method '(acquire|release|__enter__|__exit__)' of '_thread|threading\.py:)"),
    ("context variables", r"^~:<method '(get|set|reset)' of '_contextvars"),
    ("openai SDK code our code calls", r"^(openai|httpx2|pydantic|pydantic_core)/"),
]


def _where(func: Func) -> str:
    """`package/module.py:function`, or `~:<built-in ...>` for C functions."""
    path, _, name = func
    if path == "~":
        return f"~:{name}"
    for marker in ("site-packages/", "/bench-peers/", "python3.11/", f"{ROOT}/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{name}"


def _ours(key: str) -> bool:
    return key.startswith("otel_budget/")


def _passed_through(caller: str, callee: str) -> bool:
    """The SDK's own work we only pass through: the request the guard sends, the chunks the proxy reads (and the
    server-sent events under them, which the usage filter passes on)."""
    return (caller.startswith("otel_budget/core/calls.py:") and caller.endswith(("send", "asend"))
            and not _ours(callee)) or (caller.startswith(("otel_budget/instrumentation/providers/_stream.py:",
                                                          "otel_budget/instrumentation/providers/_stream_usage.py:"))
                                       and callee.startswith("openai/"))


def _category(key: str) -> str | None:
    """The category a function has of its own; None for built-ins and stdlib (they take their caller's)."""
    return next((c for c, pattern in CATEGORIES if re.search(pattern, key)), None)


def attribute(stats: pstats.Stats) -> dict[tuple[str, str], float]:
    """Seconds of self time our code caused, per (function, category): a function without a category of its own
    (a built-in, the stdlib) is charged to the categories of the callers that called it."""
    raw: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
    key = {f: _where(f) for f in raw}
    own = {f: _category(key[f]) for f in raw}
    share: dict[Func, dict[str, float]] = {f: {own[f]: 1.0} if _ours(key[f]) else {} for f in raw}  # type: ignore[dict-item]

    def incoming(f: Func, index: int) -> dict[str, float]:
        """Per category, the calls (index 1) or seconds (index 2) of f that come from us."""
        out: dict[str, float] = {}
        for c, edge in raw[f][4].items():
            if c[0] == "~" or _passed_through(key.get(c, ""), key[f]):  # a built-in's callees (any(), map())
                continue  # come from whoever called it: not split by its mixed callers
            for cat, frac in share.get(c, {}).items():
                out[cat] = out.get(cat, 0.0) + edge[index] * frac
        if own[f] is not None:  # one category of its own
            total = sum(out.values())
            return {own[f]: total} if total else {}  # type: ignore[dict-item]
        return out

    for _ in range(60):  # shares flow from callers to callees; monotone, so a fixed number of rounds converges
        for f in raw:
            if not _ours(key[f]) and raw[f][4]:
                calls = sum(edge[1] for edge in raw[f][4].values()) or raw[f][1]
                share[f] = {cat: n / calls for cat, n in incoming(f, 1).items()}
    result: dict[tuple[str, str], float] = {}
    for f in raw:
        parts = {own[f]: raw[f][2]} if _ours(key[f]) else incoming(f, 2)
        for cat, seconds in parts.items():
            if seconds:
                result[(key[f], cat)] = result.get((key[f], cat), 0.0) + seconds  # type: ignore[index]
    return result


def profile(kind: str, n: int) -> dict[tuple[str, str], float]:
    """Microseconds per call of our work, per function."""
    slot = Slot(OURS)
    fn = CALLS[kind]
    with slot.on():
        for _ in range(20):
            fn(slot.client)
        prof = cProfile.Profile(time.thread_time_ns, 1e-9)  # CPU time: a busy machine's preemptions not charged
        prof.enable()
        for i in range(n):
            fn(slot.client)
            if i % 500 == 499:
                slot.exporter.clear()
        prof.disable()
    return {k: v * 1e6 / n for k, v in attribute(pstats.Stats(prof)).items()}


def wrapt_cost(n: int = 200_000) -> float:
    """Microseconds a `wrapt.FunctionWrapper` adds to a call (wrapper body included: it only calls through)."""

    def plain(*args: Any, **kwargs: Any) -> None:
        return None

    wrapped = wrapt.FunctionWrapper(plain, lambda w, i, a, k: w(*a, **k))
    best = []
    for fn in (plain, wrapped) * 5:
        start = time.process_time_ns()
        for _ in range(n):
            fn(1, options=2)
        best.append((time.process_time_ns() - start) / n / 1000)
    return min(best[1::2]) - min(best[0::2])


def report(results: dict[str, dict[tuple[str, str], float]], n: int, wrapt_us: float) -> str:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        HEADING, "",
        f"cProfile over {n} non-streamed calls and {n // 3} {STREAM_CHUNKS}-chunk streams inside the budgeted run "
        "of `overhead.py` (every limit, default repeat and stall checks, content off, spans to an in-memory "
        f"exporter through a SimpleSpanProcessor, no MeterProvider, so metric calls hit the API's no-op); load "
        f"average {load}. A function's self time is ours in the share of its calls that come from otel-budget's "
        "code, and a built-in or stdlib function is charged to the categories of its callers; the SDK's work inside the request the guard sends and the chunks the stream proxy reads is not. "
        "cProfile, on the thread's CPU clock (a system call per event), charges every Python call: the figures come "
        "out several times the unprofiled overhead (`overhead.py`), and code made of many small calls looks dearer "
        "than it is, so read the shares and the order; a shared function's time is split between its callers by "
        "their number of calls. "
        f"wrapt's C `FunctionWrapper` (our patch on `SyncAPIClient.request`), timed apart: {wrapt_us:.2f} us a call.",
        "",
    ]
    for kind, per_func in results.items():
        total = sum(per_func.values())
        cats: dict[str, float] = {}
        for (_name, cat), us in per_func.items():
            cats[cat] = cats.get(cat, 0.0) + us
        label = "Non-streamed" if kind == "plain" else f"Streamed ({STREAM_CHUNKS} chunks)"
        lines += [f"**{label}**: {total:.0f} us of ours per call under the profiler.", "",
                  "| what | us/call | share |", "|---|---:|---:|"]
        lines += [f"| {c} | {us:.1f} | {us / total:.0%} |" for c, us in sorted(cats.items(), key=lambda kv: -kv[1])]
        lines += ["", "| function (self time) | charged to | us/call | share |", "|---|---|---:|---:|"]
        top = sorted(per_func.items(), key=lambda kv: -kv[1])[:25]
        lines += [f"| `{name}` | {cat} | {us:.1f} | {us / total:.0%} |" for (name, cat), us in top]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    parser.add_argument("--dry-run", action="store_true", help="print only")
    args = parser.parse_args(argv)
    results = {kind: profile(kind, args.calls if kind == "plain" else args.calls // 3) for kind in CALLS}
    text = report(results, args.calls, wrapt_cost())
    print(text)
    if not args.dry_run:
        write_section(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
