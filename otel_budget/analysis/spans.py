"""Spans as flat rows, read from OTLP/JSON (our FileSpanExporter, the Collector's file exporter) or from the
Jaeger query API's JSON. Records of runs and their turns are built from these rows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .untrusted import BadRecord, loads

__all__ = ["BadRecord", "SpanRow", "attribute_value", "spans_from_jaeger", "spans_from_json", "spans_from_otlp"]


@dataclass(slots=True)
class SpanRow:
    """One span: its identity, its parent, when it started (ns since the epoch) and its attributes."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start: int
    attrs: dict[str, Any]


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


def spans_from_otlp(data: Any) -> Iterator[SpanRow]:
    """Every span of one OTLP/JSON ExportTraceServiceRequest; raises BadRecord on a wrong shape."""
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
                yield SpanRow(
                    name=str(span.get("name", "")),
                    trace_id=str(span.get("traceId", "")),
                    span_id=str(span.get("spanId", "")),
                    parent_id=str(span.get("parentSpanId", "") or ""),
                    start=_int(span.get("startTimeUnixNano"), span),
                    attrs=attrs,
                )


def spans_from_jaeger(data: Any) -> Iterator[SpanRow]:
    """Every span of a Jaeger query API answer ({"data": [trace, ...]}) or of one Jaeger trace."""
    if not isinstance(data, Mapping):
        raise BadRecord("not a Jaeger JSON object")
    traces = data["data"] if isinstance(data.get("data"), list) else [data]
    for tr in traces:
        for span in _list(tr, "spans"):
            if not isinstance(span, Mapping):
                raise BadRecord("a span is not an object")
            attrs = {}
            for tag in span.get("tags") or ():
                if not isinstance(tag, Mapping) or "key" not in tag:
                    raise BadRecord(f"span {span.get('spanID', '?')}: tag without a key")
                attrs[tag["key"]] = _jaeger_value(tag.get("value"))
            parent = ""
            for ref in span.get("references") or ():
                if isinstance(ref, Mapping) and ref.get("refType") == "CHILD_OF":
                    parent = str(ref.get("spanID", ""))
                    break
            yield SpanRow(
                name=str(span.get("operationName", "")),
                trace_id=str(span.get("traceID", "")),
                span_id=str(span.get("spanID", "")),
                parent_id=parent,
                start=_int(span.get("startTime"), span) * 1000,
                attrs=attrs,
            )


def spans_from_json(data: Any) -> Iterator[SpanRow]:
    """OTLP/JSON or Jaeger JSON, whichever `data` is."""
    if isinstance(data, Mapping) and "resourceSpans" in data:
        return spans_from_otlp(data)
    if isinstance(data, Mapping) and ("data" in data or "spans" in data):
        return spans_from_jaeger(data)
    raise BadRecord("neither OTLP/JSON (resourceSpans) nor Jaeger JSON (data / spans)")


def _jaeger_value(value: Any) -> Any:
    # Jaeger turns array attributes into their JSON text.
    if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        try:
            return loads(value)
        except ValueError:
            return value
    return value


def _int(value: Any, span: Mapping[str, Any]) -> int:
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRecord(f"span {span.get('spanId') or span.get('spanID') or '?'}: start time is not a number: "
                        f"{value!r:.40}")


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRecord(f"{key} is not a list")
    return value
