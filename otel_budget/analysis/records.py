"""Finished runs as flat records, read from OTLP/JSON (our FileSpanExporter, the Collector's file exporter) or
from the Jaeger query API's JSON. Only spans of our runs count: `invoke_agent ...` spans with `stop.reason`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc

#: The dimensions analysed, with the span attribute (suffix of otel_budget.used.) they come from.
DIMENSIONS: tuple[str, ...] = ("steps", "tool_calls", "seconds", "total_tokens", "usd")

#: Stop reasons that mean "a limit stopped it" (the runs worth keeping as eval cases).
LIMIT_REASONS = frozenset({"steps", "tool_calls", "time", "tokens", "cost", "repeat", "depth"})


class BadRecord(ValueError):
    """A span or line that cannot be read; the message says why."""


@dataclass(slots=True)
class RunRecord:
    """One finished run, as its run span recorded it."""

    run_name: str
    stop_reason: str
    trace_id: str = ""
    span_id: str = ""
    limit: str | None = None
    used: dict[str, float] = field(default_factory=dict)
    resumed_from: str | None = None
    """The span id of the paused run this run resumed (its usage includes the paused part)."""


def attribute_value(value: Mapping[str, Any]) -> Any:
    """The Python value of an OTLP/JSON AnyValue ({"stringValue": ...}, {"intValue": "3"}, ...)."""
    if not isinstance(value, Mapping):
        raise BadRecord(f"attribute value is not an object: {value!r:.60}")
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [attribute_value(v) for v in (value["arrayValue"] or {}).get("values", ())]
    if not value:
        return None
    raise BadRecord(f"unknown attribute value type {sorted(value)}")


def record_from_attributes(attrs: Mapping[str, Any], name: str, trace_id: str, span_id: str) -> RunRecord | None:
    """A run record from a span's attributes, or None when the span is not a finished run of ours."""
    if attrs.get(sc.GEN_AI_OPERATION_NAME) != sc.OP_INVOKE_AGENT or sc.STOP_REASON not in attrs:
        return None
    run_name = attrs.get(sc.GEN_AI_AGENT_NAME) or name.removeprefix(f"{sc.OP_INVOKE_AGENT} ")
    used: dict[str, float] = {}
    for dim in (*DIMENSIONS, "input_tokens", "output_tokens"):
        raw = attrs.get(sc.USED_PREFIX + dim)
        if raw is None:
            continue
        try:
            used[dim] = float(raw)
        except (TypeError, ValueError):
            raise BadRecord(f"span {span_id or name}: {sc.USED_PREFIX}{dim} is not a number: {raw!r:.40}")
    resumed = attrs.get(sc.RESUMED_FROM)
    return RunRecord(
        run_name=str(run_name),
        stop_reason=str(attrs[sc.STOP_REASON]),
        trace_id=trace_id,
        span_id=span_id,
        limit=attrs.get(sc.STOP_LIMIT),
        used=used,
        resumed_from=str(resumed) if resumed else None,
    )


def records_from_otlp(data: Any) -> Iterator[RunRecord]:
    """Run records in one OTLP/JSON ExportTraceServiceRequest; raises BadRecord on a wrong shape."""
    if not isinstance(data, Mapping) or not isinstance(data.get("resourceSpans"), list):
        raise BadRecord("not an OTLP/JSON trace export (no resourceSpans list)")
    for rs in data["resourceSpans"]:
        for ss in _list(rs, "scopeSpans"):
            for span in _list(ss, "spans"):
                if not isinstance(span, Mapping):
                    raise BadRecord("a span is not an object")
                attrs = {}
                for kv in span.get("attributes") or ():
                    if not isinstance(kv, Mapping) or "key" not in kv:
                        raise BadRecord(f"span {span.get('spanId', '?')}: attribute without a key")
                    attrs[kv["key"]] = attribute_value(kv.get("value") or {})
                rec = record_from_attributes(attrs, str(span.get("name", "")), str(span.get("traceId", "")),
                                             str(span.get("spanId", "")))
                if rec is not None:
                    yield rec


def records_from_jaeger(data: Any) -> Iterator[RunRecord]:
    """Run records in a Jaeger query API answer ({"data": [trace, ...]}) or in one Jaeger trace."""
    if not isinstance(data, Mapping):
        raise BadRecord("not a Jaeger JSON object")
    traces = data["data"] if isinstance(data.get("data"), list) else [data]
    for tr in traces:
        for span in _list(tr, "spans"):
            attrs = {}
            for tag in span.get("tags") or ():
                if not isinstance(tag, Mapping) or "key" not in tag:
                    raise BadRecord(f"span {span.get('spanID', '?')}: tag without a key")
                attrs[tag["key"]] = tag.get("value")
            rec = record_from_attributes(attrs, str(span.get("operationName", "")), str(span.get("traceID", "")),
                                         str(span.get("spanID", "")))
            if rec is not None:
                yield rec


def records_from_json(data: Any) -> Iterator[RunRecord]:
    """OTLP/JSON or Jaeger JSON, whichever `data` is."""
    if isinstance(data, Mapping) and "resourceSpans" in data:
        return records_from_otlp(data)
    if isinstance(data, Mapping) and ("data" in data or "spans" in data):
        return records_from_jaeger(data)
    raise BadRecord("neither OTLP/JSON (resourceSpans) nor Jaeger JSON (data / spans)")


def final_runs(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Drop paused runs that were resumed later: the resumed run carries their usage, so count it once."""
    runs = list(records)
    superseded = {r.resumed_from for r in runs if r.resumed_from}
    return [r for r in runs if not (r.span_id and r.span_id in superseded)]


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRecord(f"{key} is not a list")
    return value
