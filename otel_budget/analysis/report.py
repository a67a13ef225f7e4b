"""`otel-budget report`: finished runs by stop reason, with their cost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .records import RunRecord, final_runs
from .untrusted import printable


def _row() -> dict[str, Any]:
    return {"runs": 0, "cost_usd": 0.0}


def report(records: Iterable[RunRecord]) -> dict[str, Any]:
    """Runs and cost by stop reason, overall and per run name (a JSON-ready dict)."""
    total = _row()
    by_reason: dict[str, dict[str, Any]] = defaultdict(_row)
    by_run: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(_row))
    for rec in final_runs(records):
        cost = rec.used.get("usd", 0.0)
        for row in (total, by_reason[rec.stop_reason], by_run[rec.run_name][rec.stop_reason]):
            row["runs"] += 1
            row["cost_usd"] += cost
    for row in (total, *by_reason.values(), *(r for rows in by_run.values() for r in rows.values())):
        row["cost_usd"] = round(row["cost_usd"], 10)
        row["avg_usd"] = round(row["cost_usd"] / row["runs"], 10) if row["runs"] else 0.0
    order = sorted(by_reason, key=lambda k: (k != "done", -by_reason[k]["runs"], k))
    return {
        "total": total,
        "by_reason": {k: by_reason[k] for k in order},
        "by_run": {name: dict(sorted(rows.items())) for name, rows in sorted(by_run.items())},
    }


def format_report(result: dict[str, Any]) -> str:
    total = result["total"]
    if not total["runs"]:
        return "No finished runs found.\n"
    lines = [f"{'stop reason':<20}{'runs':>8}{'share':>8}{'cost_usd':>14}{'avg_usd':>12}"]
    for reason, row in result["by_reason"].items():
        share = row["runs"] / total["runs"]
        lines.append(f"{printable(reason):<20}{row['runs']:>8}{share:>8.1%}{row['cost_usd']:>14.4f}{row['avg_usd']:>12.4f}")
    lines.append(f"{'total':<20}{total['runs']:>8}{1:>8.0%}{total['cost_usd']:>14.4f}{total['avg_usd']:>12.4f}")
    if len(result["by_run"]) > 1:
        lines.append("")
        lines.append(f"{'run name':<24}{'stop reason':<20}{'runs':>8}{'cost_usd':>14}")
        for name, rows in result["by_run"].items():
            for reason, row in rows.items():
                lines.append(f"{printable(name):<24}{printable(reason):<20}{row['runs']:>8}{row['cost_usd']:>14.4f}")
    return "\n".join(lines) + "\n"
