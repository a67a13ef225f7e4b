"""Runs with their turns: model call and tool spans attached to the nearest run span above them.

Spans of one trace arrive in any order and across lines (a run span ends, and is exported, after its
children), so rows are gathered first and put together at the end. Only what the analyses need is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..telemetry import semconv as sc
from .records import RunRecord, TurnRecord, record_from_span
from .spans import SpanRow
from .untrusted import MAX_DEPTH, BadRecord, TooDeep, depth, figure, loads


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
        # All or nothing: rows are read into local lists first, so a bad row (BadRecord) leaves no part of its
        # input behind.
        runs: list[RunRecord] = []
        calls: list[_Call] = []
        tools: list[_Tool] = []
        parents: dict[tuple[str, str], str] = {}
        for row in rows:
            rec = record_from_span(row)
            if rec is not None:
                runs.append(rec)
                continue
            op = row.attrs.get(sc.GEN_AI_OPERATION_NAME)
            if sc.COST_SOURCE in row.attrs and op in sc.MODEL_OPERATIONS:  # our model calls
                calls.append(_Call(row.trace_id, row.parent_id, row.start, _turn(row)))
            elif op == sc.OP_EXECUTE_TOOL:
                tools.append(_Tool(row.trace_id, row.parent_id, row.start, _result(row)))
            else:
                parents[(row.trace_id, row.span_id)] = row.parent_id
        self._runs.extend(runs)
        self._calls.extend(calls)
        self._tools.extend(tools)
        self._parents.update(parents)
        return len(runs)

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
    where = f"span {row.span_id or row.name}"
    return TurnRecord(
        turn=int(_figure(a, sc.TURN, where)),
        input_tokens=int(_figure(a, sc.GEN_AI_USAGE_INPUT_TOKENS, where)),
        output_tokens=int(_figure(a, sc.GEN_AI_USAGE_OUTPUT_TOKENS, where)),
        cost_usd=_figure(a, sc.COST_USD, where),
        actions=[str(x) for x in actions],
        input_messages=_content(a.get(sc.GEN_AI_INPUT_MESSAGES), sc.GEN_AI_INPUT_MESSAGES, where),
        output_messages=_content(a.get(sc.GEN_AI_OUTPUT_MESSAGES), sc.GEN_AI_OUTPUT_MESSAGES, where),
    )


def _result(row: SpanRow) -> str:
    a = row.attrs
    name = str(a.get(sc.GEN_AI_TOOL_NAME) or row.name.removeprefix(f"{sc.OP_EXECUTE_TOOL} "))
    args = a.get(sc.TOOL_ARGUMENTS_SIGNATURE) or "?"
    result = a.get(sc.TOOL_RESULT_SIGNATURE) or ("error" if a.get(sc.ERROR_TYPE) else "?")
    return f"{name}:{args}={result}"


def _content(value: Any, key: str, where: str) -> Any:
    """Captured messages: their JSON when they are strict JSON, else the text; refused when nested too deep."""
    if isinstance(value, str):
        try:
            value = loads(value)
        except TooDeep:
            raise BadRecord(f"{where}: {key} is nested too deeply to read") from None
        except ValueError:
            return value
    if depth(value) > MAX_DEPTH:
        raise BadRecord(f"{where}: {key} is nested deeper than {MAX_DEPTH} levels")
    return value


def _figure(attrs: dict[str, Any], key: str, where: str) -> float:
    """A turn's number (absent is 0); a value that is not a finite figure makes the line unreadable."""
    value = attrs.get(key)
    if value is None or value == "":
        return 0.0
    return figure(value, f"{where}: {key}")
