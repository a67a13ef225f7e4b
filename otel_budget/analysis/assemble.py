"""Runs with their turns: model call and tool spans attached to the nearest run span above them.

Spans of one trace arrive in any order and across lines (a run span ends, and is exported, after its
children), so rows are gathered first and put together at the end. Only what the analyses need is kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..telemetry import semconv as sc
from .records import RunRecord, TurnRecord, record_from_span
from .spans import SpanRow


@dataclass(slots=True)
class _Call:
    trace_id: str
    parent_id: str
    start: int
    turn: TurnRecord


@dataclass(slots=True)
class _Tool:
    trace_id: str
    parent_id: str
    start: int
    result: str


class RunAssembler:
    """Collects span rows; `runs()` returns the finished runs with their turns in order."""

    def __init__(self) -> None:
        self._runs: list[RunRecord] = []
        self._parents: dict[tuple[str, str], str] = {}
        self._calls: list[_Call] = []
        self._tools: list[_Tool] = []

    def add(self, rows: Iterable[SpanRow]) -> int:
        """Take the rows of one input (a line, a trace); returns how many runs they held."""
        runs = 0
        for row in rows:
            rec = record_from_span(row)
            if rec is not None:
                self._runs.append(rec)
                runs += 1
                continue
            op = row.attrs.get(sc.GEN_AI_OPERATION_NAME)
            if sc.COST_SOURCE in row.attrs and op in sc.MODEL_OPERATIONS:  # our model calls
                self._calls.append(_Call(row.trace_id, row.parent_id, row.start, _turn(row)))
            elif op == sc.OP_EXECUTE_TOOL:
                self._tools.append(_Tool(row.trace_id, row.parent_id, row.start, _result(row)))
            else:
                self._parents[(row.trace_id, row.span_id)] = row.parent_id
        return runs

    def runs(self) -> list[RunRecord]:
        """The runs read so far, each with its turns (model calls in order, tool results attached)."""
        by_span = {(r.trace_id, r.span_id): r for r in self._runs}
        calls: dict[int, list[_Call]] = {}
        tools: dict[int, list[_Tool]] = {}
        for call in self._calls:
            owner = self._owner(by_span, call.trace_id, call.parent_id)
            if owner is not None:
                calls.setdefault(id(owner), []).append(call)
        for tool in self._tools:
            owner = self._owner(by_span, tool.trace_id, tool.parent_id)
            if owner is not None:
                tools.setdefault(id(owner), []).append(tool)
        for rec in self._runs:
            own = sorted(calls.get(id(rec), ()), key=lambda c: (c.turn.turn or 0, c.start))
            rec.turns = [c.turn for c in own]
            starts = [c.start for c in own]
            for tool in sorted(tools.get(id(rec), ()), key=lambda t: t.start):
                # A tool result belongs to the last model call that started before the tool ran.
                index = max((i for i, s in enumerate(starts) if s <= tool.start), default=None)
                if index is not None:
                    rec.turns[index].results.append(tool.result)
        return list(self._runs)

    def _owner(self, by_span: dict[tuple[str, str], RunRecord], trace_id: str, parent: str) -> RunRecord | None:
        seen = 0
        while parent and seen < 64:  # a cycle or a very deep tree is not ours to follow further
            rec = by_span.get((trace_id, parent))
            if rec is not None:
                return rec
            parent = self._parents.get((trace_id, parent), "")
            seen += 1
        return None


def _turn(row: SpanRow) -> TurnRecord:
    a = row.attrs
    actions = a.get(sc.ACTIONS) or []
    if isinstance(actions, str):
        actions = [actions]
    return TurnRecord(
        turn=_int(a.get(sc.TURN)),
        input_tokens=_int(a.get(sc.GEN_AI_USAGE_INPUT_TOKENS)),
        output_tokens=_int(a.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS)),
        cost_usd=_float(a.get(sc.COST_USD)),
        actions=[str(x) for x in actions],
        input_messages=_content(a.get(sc.GEN_AI_INPUT_MESSAGES)),
        output_messages=_content(a.get(sc.GEN_AI_OUTPUT_MESSAGES)),
    )


def _result(row: SpanRow) -> str:
    a = row.attrs
    name = str(a.get(sc.GEN_AI_TOOL_NAME) or row.name.removeprefix(f"{sc.OP_EXECUTE_TOOL} "))
    args = a.get(sc.TOOL_ARGUMENTS_SIGNATURE) or "?"
    result = a.get(sc.TOOL_RESULT_SIGNATURE) or ("error" if a.get(sc.ERROR_TYPE) else "?")
    return f"{name}:{args}={result}"


def _content(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
