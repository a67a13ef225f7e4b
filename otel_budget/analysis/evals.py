"""`otel-budget evals FILE -o cases.jsonl`: every run that did not end `done`, as one eval case per line.

A case holds what is needed to replay and judge the run: its name, trace id, stop reason, limit, wrap-up, its
actions turn by turn and, when content was captured, the task (the first request's messages) and the messages
of its last turn. The format is plain JSON lines, one object per case.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

from .records import RunRecord, final_runs
from .untrusted import dumps


def cases(records: Iterable[RunRecord]) -> Iterator[dict[str, Any]]:
    """The eval cases: one per run whose stop reason is not `done`, in the order the runs started."""
    for rec in sorted(final_runs(records), key=lambda r: (r.start, r.trace_id)):
        if rec.stop_reason == "done":
            continue
        case: dict[str, Any] = {
            "run_name": rec.run_name,
            "trace_id": rec.trace_id,
            "stop_reason": rec.stop_reason,
            "limit": rec.limit,
            "wrap_up": rec.wrap_up,
            "used": rec.used,
            "turns": [
                {
                    "turn": t.turn or i,
                    "actions": t.actions,
                    "results": t.results,
                    "input_tokens": t.input_tokens,
                    "output_tokens": t.output_tokens,
                }
                for i, t in enumerate(rec.turns, 1)
            ],
        }
        first = rec.turns[0] if rec.turns else None
        last = rec.turns[-1] if rec.turns else None
        if first is not None and first.input_messages is not None:
            case["task"] = first.input_messages
        if last is not None and (last.input_messages is not None or last.output_messages is not None):
            case["messages"] = {"input": last.input_messages, "output": last.output_messages}
        yield case


def write_cases(records: Iterable[RunRecord], out: IO[str]) -> int:
    """Write the cases as JSON lines; returns how many were written."""
    count = 0
    for case in cases(records):
        out.write(dumps(case, ensure_ascii=False, default=str) + "\n")
        count += 1
    return count
