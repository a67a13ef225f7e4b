"""Caps from data: the distribution of successful runs per run name, a suggested Budget (2.5 x p95), how many
past successful runs each cap would have cut, and the runs that stopped at a limit (the eval cases)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from .records import DIMENSIONS, LIMIT_REASONS, RunRecord, final_runs
from .untrusted import printable

#: Suggested cap = HEADROOM x p95 of the runs that ended `done`.
HEADROOM = 2.5
#: Below this many successful runs a p95 is a first guess; the output says so.
FEW_RUNS = 20
#: Dimension -> the Budget field it suggests.
BUDGET_FIELDS = {
    "steps": "max_steps",
    "tool_calls": "max_tool_calls",
    "seconds": "max_seconds",
    "total_tokens": "max_total_tokens",
    "usd": "max_usd",
}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def ceil_significant(value: float, digits: int = 2) -> float:
    """Round up to `digits` significant digits: 237.6 -> 240, 0.01234 -> 0.013."""
    if not value > 0 or not math.isfinite(value):
        return 0.0
    exp = math.floor(math.log10(value)) - digits + 1
    step = 10.0**exp
    out = math.ceil(value / step - 1e-9) * step
    return round(out, max(0, -exp))


def suggest_cap(dim: str, p95: float) -> float | int | None:
    """The suggested cap for a dimension from its p95, rounded sensibly; None when nothing to cap."""
    raw = HEADROOM * p95
    if not raw > 0 or not math.isfinite(raw):  # nothing to cap, or a figure no cap can be made of
        return None
    if dim in ("steps", "tool_calls"):
        return max(1, math.ceil(raw - 1e-9))  # counts: whole numbers, up
    if dim == "total_tokens":
        return int(ceil_significant(raw))
    if dim == "seconds":
        return max(1, int(ceil_significant(raw))) if raw >= 1 else 1  # a nice whole number of seconds
    return ceil_significant(raw)  # usd: 2 significant digits


def recommend(records: Iterable[RunRecord]) -> dict[str, Any]:
    """Per run name: distribution, suggested budget, cuts and eval cases (a JSON-ready dict)."""
    by_name: dict[str, list[RunRecord]] = defaultdict(list)
    for rec in final_runs(records):
        by_name[rec.run_name].append(rec)
    out: dict[str, Any] = {}
    for name in sorted(by_name):
        runs = by_name[name]
        done = [r for r in runs if r.stop_reason == "done"]
        limited = [r for r in runs if r.stop_reason in LIMIT_REASONS]
        dims: dict[str, Any] = {}
        budget: dict[str, float | int] = {}
        for dim in DIMENSIONS:
            values = sorted(r.used[dim] for r in done if dim in r.used)
            if not values:
                continue
            p95 = percentile(values, 0.95)
            cap = suggest_cap(dim, p95)
            dims[dim] = {
                "p50": percentile(values, 0.50),
                "p95": p95,
                "max": values[-1],
                "cap": cap,
                "cut": sum(1 for v in values if cap is not None and v > cap),
            }
            if cap is not None:
                budget[BUDGET_FIELDS[dim]] = cap
        out[name] = {
            "runs": len(runs),
            "done": len(done),
            "stopped_at_limit": len(limited),
            "other": len(runs) - len(done) - len(limited),
            "few_runs": len(done) < FEW_RUNS,
            "dimensions": dims,
            "budget": budget,
            "eval_cases": [
                {"trace_id": r.trace_id, "stop_reason": r.stop_reason, "limit": r.limit} for r in limited
            ],
        }
    return out


def budget_text(budget: dict[str, float | int]) -> str:
    """`Budget(max_steps=..., ...)` as Python source."""
    parts = []
    for key, value in budget.items():
        parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return f"Budget({', '.join(parts)})"


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"


def format_recommendation(result: dict[str, Any], max_cases: int = 20) -> str:
    """The human-readable form of `recommend()`."""
    if not result:
        return "No finished runs found (run spans are `invoke_agent ...` with a stop.reason attribute).\n"
    lines: list[str] = []
    for name, info in result.items():
        lines.append(
            f"{printable(name)}: {info['runs']} runs, {info['done']} done, {info['stopped_at_limit']} stopped at a limit, "
            f"{info['other']} other"
        )
        if info["dimensions"]:
            lines.append(f"  {'dimension':<14}{'p50':>12}{'p95':>12}{'max':>12}{'cap':>12}{'cut':>6}")
            for dim, d in info["dimensions"].items():
                lines.append(
                    f"  {dim:<14}{_num(d['p50']):>12}{_num(d['p95']):>12}{_num(d['max']):>12}{_num(d['cap']):>12}"
                    f"{d['cut']:>6}"
                )
            lines.append(f"  suggested: {budget_text(info['budget'])}   # {HEADROOM:g} x p95 of the done runs")
            if info["few_runs"]:
                lines.append(f"  note: only {info['done']} successful runs; treat these caps as a first guess.")
        else:
            lines.append("  no successful runs: nothing to learn caps from yet.")
        cases = info["eval_cases"]
        if cases:
            lines.append("  stopped at a limit (keep them as eval cases):")
            for case in cases[:max_cases]:
                lines.append(f"    {printable(case['trace_id'] or '-')}  {printable(case['stop_reason'])}  "
                             f"{printable(case['limit'] or '')}".rstrip())
            if len(cases) > max_cases:
                lines.append(f"    ... and {len(cases) - max_cases} more (--json lists all)")
        lines.append("")
    return "\n".join(lines)
