"""Finished runs as flat records, read from OTLP/JSON (our FileSpanExporter, the Collector's file exporter) or
from the Jaeger query API's JSON. Only spans of our runs count: `invoke_agent ...` spans with `stop.reason`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..telemetry import semconv as sc
from .spans import BadRecord, SpanRow, attribute_value, spans_from_jaeger, spans_from_json, spans_from_otlp
from .untrusted import figure

#: The dimensions analysed, with the span attribute (suffix of otel_budget.used.) they come from.
DIMENSIONS: tuple[str, ...] = ("steps", "tool_calls", "seconds", "total_tokens", "usd")

#: Stop reasons that mean "a limit stopped it" (the runs worth keeping as eval cases).
LIMIT_REASONS = frozenset({"steps", "tool_calls", "time", "tokens", "cost", "repeat", "stalled", "depth"})

__all__ = [
    "DIMENSIONS", "LIMIT_REASONS", "BadRecord", "RunRecord", "TurnRecord", "attribute_value", "final_runs",
    "record_from_attributes", "record_from_span", "records_from_jaeger", "records_from_json", "records_from_otlp",
]


@dataclass(slots=True)
class TurnRecord:
    """One model call of a run, with the tool calls it asked for and what those tools returned."""

    turn: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    actions: list[str] = field(default_factory=list)
    """The tool calls the model requested in this call, as `name:arguments-signature`."""
    results: list[str] = field(default_factory=list)
    """The tool executions that followed it, as `name:arguments-signature=result-signature`."""
    input_messages: Any = None
    """The request's messages, when content was captured."""
    output_messages: Any = None
    """The answer, when content was captured."""

    def action_key(self) -> str:
        """What this turn did, for aligning runs: the tools asked for and the results they gave."""
        did = ", ".join(self.actions) if self.actions else "answer"
        return f"{did} -> {', '.join(self.results)}" if self.results else did


@dataclass(slots=True)
class RunRecord:
    """One finished run, as its run span recorded it (and its turns, when its child spans were read)."""

    run_name: str
    stop_reason: str
    trace_id: str = ""
    span_id: str = ""
    limit: str | None = None
    used: dict[str, float] = field(default_factory=dict)
    resumed_from: str | None = None
    """The span id of the paused run this run resumed (its usage includes the paused part)."""
    limits: dict[str, float] = field(default_factory=dict)
    """The run's own caps (otel_budget.limit.<dim>)."""
    wrap_up: str | None = None
    start: int = 0
    """Start time, ns since the epoch."""
    turns: list[TurnRecord] = field(default_factory=list)


def _number(attrs: Mapping[str, Any], key: str, where: str) -> float | None:
    raw = attrs.get(key)
    if raw is None:
        return None
    return figure(raw, f"span {where}: {key}")


def record_from_attributes(attrs: Mapping[str, Any], name: str, trace_id: str, span_id: str) -> RunRecord | None:
    """A run record from a span's attributes, or None when the span is not a finished run of ours."""
    if attrs.get(sc.GEN_AI_OPERATION_NAME) != sc.OP_INVOKE_AGENT or sc.STOP_REASON not in attrs:
        return None
    run_name = attrs.get(sc.GEN_AI_AGENT_NAME) or name.removeprefix(f"{sc.OP_INVOKE_AGENT} ")
    where = span_id or name
    used: dict[str, float] = {}
    limits: dict[str, float] = {}
    for dim in sc.SPAN_DIMS:
        value = _number(attrs, sc.USED_PREFIX + dim, where)
        if value is not None:
            used[dim] = value
        cap = _number(attrs, sc.LIMIT_PREFIX + dim, where)
        if cap is not None:
            limits[dim] = cap
    resumed = attrs.get(sc.RESUMED_FROM)
    wrap_up = attrs.get(sc.WRAP_UP)
    return RunRecord(
        run_name=str(run_name),
        stop_reason=str(attrs[sc.STOP_REASON]),
        trace_id=trace_id,
        span_id=span_id,
        limit=attrs.get(sc.STOP_LIMIT),
        used=used,
        resumed_from=str(resumed) if resumed else None,
        limits=limits,
        wrap_up=str(wrap_up) if wrap_up is not None else None,
    )


def record_from_span(row: SpanRow) -> RunRecord | None:
    """The run record of a span row, or None when it is not a finished run of ours."""
    rec = record_from_attributes(row.attrs, row.name, row.trace_id, row.span_id)
    if rec is not None:
        rec.start = row.start
    return rec


def _records(rows: Iterable[SpanRow]) -> Iterator[RunRecord]:
    for row in list(rows):  # the whole input is read first: a wrong shape raises before any record is yielded
        rec = record_from_span(row)
        if rec is not None:
            yield rec


def records_from_otlp(data: Any) -> Iterator[RunRecord]:
    """Run records in one OTLP/JSON ExportTraceServiceRequest; raises BadRecord on a wrong shape."""
    return _records(spans_from_otlp(data))


def records_from_jaeger(data: Any) -> Iterator[RunRecord]:
    """Run records in a Jaeger query API answer ({"data": [trace, ...]}) or in one Jaeger trace."""
    return _records(spans_from_jaeger(data))


def records_from_json(data: Any) -> Iterator[RunRecord]:
    """OTLP/JSON or Jaeger JSON, whichever `data` is."""
    return _records(spans_from_json(data))


def final_runs(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Drop paused runs that were resumed later: the resumed run carries their usage, so count it once."""
    runs = list(records)
    superseded = {r.resumed_from for r in runs if r.resumed_from}
    return [r for r in runs if not (r.span_id and r.span_id in superseded)]
