"""`otel-budget compare BEFORE AFTER`: the runs of each name before and after a change, side by side.

A change passes when, for every run name seen in both inputs, the completion rate did not fall and the
worst-case cost did not rise. It also warns when a cap of the AFTER runs is so close to what healthy runs
need that it cuts them (the classic mistake: p95 is 14 steps and someone sets 16).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from .recommend import BUDGET_FIELDS, HEADROOM, percentile, suggest_cap
from .records import RunRecord, final_runs
from .untrusted import printable

#: The figures compared, with the otel_budget.used.<dim> they come from.
FIGURES: tuple[str, ...] = ("steps", "total_tokens", "usd", "seconds")
#: A cap below this multiple of the healthy runs' p95 is reported as cutting healthy runs.
TIGHT = 1.5
_EPS = 1e-9


def summarize(records: Iterable[RunRecord]) -> dict[str, dict[str, Any]]:
    """Per run name: runs, completion rate, p50/p95/max per figure, stops by reason, the caps in force."""
    by_name: dict[str, list[RunRecord]] = defaultdict(list)
    for rec in final_runs(records):
        by_name[rec.run_name].append(rec)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(by_name):
        runs = by_name[name]
        done = [r for r in runs if r.stop_reason == "done"]
        unusable = sorted({fig for r in runs for fig, v in r.used.items() if fig in FIGURES and not math.isfinite(v)})
        figures: dict[str, dict[str, float]] = {}
        for fig in FIGURES:
            values = _finite(r.used.get(fig) for r in runs)
            if values and fig not in unusable:
                figures[fig] = {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95), "max": values[-1]}
        healthy: dict[str, float] = {}
        for fig in (*FIGURES, "tool_calls"):
            values = _finite(r.used.get(fig) for r in done)
            if values:
                healthy[fig] = percentile(values, 0.95)
        caps: dict[str, float] = {}
        for dim in BUDGET_FIELDS:
            seen = Counter(_finite(r.limits.get(dim) for r in runs))
            if seen:
                caps[dim] = seen.most_common(1)[0][0]
        out[name] = {
            "runs": len(runs),
            "done": len(done),
            "completion_rate": len(done) / len(runs) if runs else 0.0,
            "figures": figures,
            "stops": dict(sorted(Counter(r.stop_reason for r in runs).items())),
            "healthy_p95": healthy,
            "caps": caps,
            "_healthy": {fig: _finite(r.used.get(fig) for r in done) for fig in BUDGET_FIELDS},
            "_unusable": unusable,
        }
    return out


def _finite(values: Iterable[float | None]) -> list[float]:
    """The finite values, sorted (sorted() puts a NaN anywhere, and every comparison with it is false)."""
    return sorted(v for v in values if v is not None and math.isfinite(v))


def compare(before: Iterable[RunRecord], after: Iterable[RunRecord]) -> dict[str, Any]:
    """Both sides per run name, the change, the verdict, and warnings about caps that cut healthy runs."""
    b, a = summarize(before), summarize(after)
    names: dict[str, Any] = {}
    regressions: list[str] = []
    warnings: list[str] = []
    for name in sorted(set(b) | set(a)):
        left, right = b.get(name), a.get(name)
        entry: dict[str, Any] = {"before": _public(left), "after": _public(right)}
        for side, summary in (("before", left), ("after", right)):
            for fig in (summary or {}).get("_unusable", ()):
                # NaN sorts anywhere and compares false: a figure that is not a number can hide any regression.
                regressions.append(f"{name}: {fig} cannot be compared: a run {side} the change recorded a value "
                                   "that is not a finite number")
        if left is not None and right is not None:
            change: dict[str, Any] = {"completion_rate": right["completion_rate"] - left["completion_rate"]}
            for fig in FIGURES:
                lf, rf = left["figures"].get(fig), right["figures"].get(fig)
                if lf and rf:
                    change[fig] = {k: rf[k] - lf[k] for k in ("p50", "p95", "max")}
            entry["change"] = change
            if change["completion_rate"] < -_EPS:
                regressions.append(
                    f"{name}: completion rate fell from {left['completion_rate']:.1%} to {right['completion_rate']:.1%}"
                )
            worst = change.get("usd", {}).get("max", 0.0)
            if worst > _EPS:
                regressions.append(
                    f"{name}: worst-case cost rose from ${left['figures']['usd']['max']:.4f} to "
                    f"${right['figures']['usd']['max']:.4f}"
                )
        for side, summary in (("after", right), ("before", left)):
            if summary is not None:
                warnings.extend(_tight_caps(name, side, summary, left or summary))
                break
        names[name] = entry
    return {"runs": names, "regressions": regressions, "warnings": warnings, "passed": not regressions}


def incomplete(result: dict[str, Any], side: str, path: str, bad: int, lines: int) -> None:
    """Fail `result` when `bad` of the `lines` inputs of one side could not be read: the runs on those lines
    (their cost, whether they completed) cannot be compared, and could hide a regression."""
    if bad:
        result["regressions"].append(
            f"{bad} of {lines} inputs {side} the change ({path}) could not be read, so their runs cannot be "
            "compared; fix or remove those lines (reported above) and compare again")
        result["passed"] = False


def _tight_caps(name: str, side: str, summary: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """Caps of `summary`'s runs within TIGHT x the p95 of the healthy runs in `reference` (BEFORE if there)."""
    out = []
    for dim, cap in summary["caps"].items():
        values = reference["_healthy"].get(dim) or summary["_healthy"].get(dim) or []
        if not values:
            continue
        p95 = percentile(values, 0.95)
        if p95 <= 0 or cap >= TIGHT * p95:
            continue
        cut = sum(1 for v in values if v > cap)
        suggested = suggest_cap(dim, p95)
        out.append(
            f"{name}: {BUDGET_FIELDS[dim]}={_num(cap)} is {cap / p95:.2f}x the p95 of healthy runs "
            f"({_num(p95)} {dim}): it leaves almost no room for healthy runs; {cut} of {len(values)} of them needed more. "
            f"`otel-budget recommend` suggests {_num(suggested)} ({HEADROOM:g} x p95)."
        )
    return out


def _public(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {k: v for k, v in summary.items() if not k.startswith("_")}


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.4f}" if abs(value) < 1 else f"{value:,.2f}"


def format_compare(result: dict[str, Any]) -> str:
    """The text form of `compare()`."""
    lines: list[str] = []
    for name, entry in result["runs"].items():
        left, right = entry["before"], entry["after"]
        lines.append(printable(name))
        lines.append(f"  {'':<18}{'before':>14}{'after':>14}{'change':>14}")
        lines.append(_row("runs", left and left["runs"], right and right["runs"]))
        lines.append(_row("completion rate", left and left["completion_rate"], right and right["completion_rate"],
                          pct=True))
        for fig in FIGURES:
            for stat in ("p50", "p95", "max"):
                lv = left["figures"].get(fig, {}).get(stat) if left else None
                rv = right["figures"].get(fig, {}).get(stat) if right else None
                if lv is not None or rv is not None:
                    lines.append(_row(f"{fig} {stat}", lv, rv))
        reasons = sorted(set((left or {}).get("stops", {})) | set((right or {}).get("stops", {})))
        for reason in reasons:
            lines.append(_row(f"stop: {printable(reason)}", (left or {}).get("stops", {}).get(reason, 0) if left else None,
                              (right or {}).get("stops", {}).get(reason, 0) if right else None))
        lines.append("")
    for warning in result["warnings"]:
        lines.append(f"warning: {printable(warning)}")
    for regression in result["regressions"]:
        lines.append(f"REGRESSION: {printable(regression)}")
    lines.append("PASS: completion rate held and the worst-case cost did not rise." if result["passed"]
                 else "FAIL: see the regressions above.")
    return "\n".join(lines) + "\n"


def _row(label: str, left: float | None, right: float | None, pct: bool = False) -> str:
    def cell(v: float | None) -> str:
        if v is None:
            return "-"
        return f"{v:.1%}" if pct else _num(v)

    change = "" if left is None or right is None else (
        f"{right - left:+.1%}" if pct else ("0" if abs(right - left) < _EPS else f"{'+' if right > left else '-'}"
                                                                                   f"{_num(abs(right - left))}")
    )
    return f"  {label:<18}{cell(left):>14}{cell(right):>14}{change:>14}"
