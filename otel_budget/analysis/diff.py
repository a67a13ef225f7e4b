"""`otel-budget diff FILE --run-name NAME`: where the runs of one task stop doing the same thing.

Runs are aligned turn by turn by action: the tools the model asked for (name and a signature of the canonical
arguments) and the signatures of the results those tools returned. The first turn at which the runs do not all
agree is the divergence; the runs are grouped by what they did there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .records import RunRecord, final_runs
from .untrusted import printable


def _action(rec: RunRecord, index: int) -> str:
    if index < len(rec.turns):
        return rec.turns[index].action_key()
    return f"(ended: {rec.stop_reason})"


def diff(records: Iterable[RunRecord], run_name: str) -> dict[str, Any]:
    """The common prefix of the runs named `run_name`, and the first divergence (None when they agree)."""
    runs = sorted((r for r in final_runs(records) if r.run_name == run_name), key=lambda r: (r.start, r.trace_id))
    longest = max((len(r.turns) for r in runs), default=0)
    common: list[str] = []
    divergence: dict[str, Any] | None = None
    for index in range(longest):
        groups: dict[str, list[RunRecord]] = {}
        for rec in runs:
            groups.setdefault(_action(rec, index), []).append(rec)
        if len(groups) == 1:
            common.append(next(iter(groups)))
            continue
        branches = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        divergence = {
            "turn": index + 1,
            "branches": [
                {
                    "action": action,
                    "runs": [r.trace_id for r in members],
                    "stop_reasons": sorted({r.stop_reason for r in members}),
                }
                for action, members in branches
            ],
        }
        break
    return {
        "run_name": run_name,
        "runs": len(runs),
        "turns": longest,
        "common": common,
        "divergence": divergence,
        "stop_reasons": sorted({r.stop_reason for r in runs}),
    }


def format_diff(result: dict[str, Any]) -> str:
    """The text form of `diff()`."""
    name, runs = printable(result["run_name"]), result["runs"]
    if not runs:
        return f"No finished runs named '{name}'.\n"
    lines = [f"{name}: {runs} runs, up to {result['turns']} turns"]
    for number, action in enumerate(result["common"], 1):
        lines.append(f"  turn {number:>3}  all {runs} runs: {printable(action)}")
    div = result["divergence"]
    if div is None:
        lines.append("No divergence: every run took the same actions with the same results.")
        return "\n".join(lines) + "\n"
    lines.append(f"First divergence at turn {div['turn']}:")
    for i, branch in enumerate(div["branches"]):
        label = chr(ord("A") + i) if i < 26 else str(i)
        count = len(branch["runs"])
        lines.append(f"  branch {label} ({count} run{'s' if count != 1 else ''}, ended "
                     f"{printable(', '.join(branch['stop_reasons']))}): {printable(branch['action'])}")
        shown = branch["runs"][:5]
        more = f" and {count - len(shown)} more" if count > len(shown) else ""
        lines.append(f"    runs: {printable(', '.join(t or '-' for t in shown))}{more}")
    return "\n".join(lines) + "\n"
