"""`FileSpanExporter`: spans to a file, one OTLP/JSON line per export batch, for `otel-budget recommend`.

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(otel_budget.FileSpanExporter("runs.jsonl")))
    otel_budget.instrument(tracer_provider=provider)

Each line is the OTLP/JSON encoding of an `ExportTraceServiceRequest` (`resourceSpans` / `scopeSpans` /
`spans`, ids in hex, attributes as `{key, value: {stringValue|intValue|...}}`), the same shape the
OpenTelemetry Collector's `file` exporter writes, so either file can be analysed.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class FileSpanExporter(SpanExporter):
    """Append each export batch to `path` as one OTLP/JSON line. Never raises into the caller."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = encode_spans_json(spans)
            with self._lock:
                if self._file is None:
                    self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
                self._file.write(line + "\n")
                self._file.flush()
        except Exception:  # noqa: BLE001 - telemetry never breaks the agent
            log.debug("otel-budget: could not write spans to %s", self.path, exc_info=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.flush()
                except OSError:
                    return False
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None


def encode_spans_json(spans: Sequence[ReadableSpan]) -> str:
    """The OTLP/JSON text (one line) of an ExportTraceServiceRequest holding `spans`."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for rs in data.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return json.dumps(data, separators=(",", ":"))


def _hex_ids(obj: dict[str, Any]) -> None:
    """protobuf's JSON gives bytes in base64; OTLP/JSON wants trace and span ids in hex."""
    for name in _ID_FIELDS:
        value = obj.get(name)
        if isinstance(value, str) and value:
            obj[name] = base64.b64decode(value).hex()
