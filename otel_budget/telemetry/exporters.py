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
import errno
import json
import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .messages import content_capture_from_env

log = logging.getLogger(__name__)

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")

#: Whether content capture is on: the environment's setting, until `core.config` points this at the settings
#: `instrument()` installed (telemetry sits below the core and reads it through this hook).
capture_on: Callable[[], bool] = content_capture_from_env


class FileSpanExporter(SpanExporter):
    """Append each export batch to `path` as one OTLP/JSON line. Never raises into the caller."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            found = os.stat(self.path)
        except OSError:
            found = None  # created on the first export
        if found is not None and not stat.S_ISREG(found.st_mode):
            raise ValueError(_not_a_file(self.path, found.st_mode))
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._closed = False
        self._refused = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            line = encode_spans_json(spans)
            with self._lock:
                if self._file is None:
                    self._file = self._open()
                    if self._file is None:
                        return SpanExportResult.FAILURE
                self._file.write(line + "\n")
                self._file.flush()
        except Exception:  # noqa: BLE001 - telemetry never breaks the agent
            log.debug("otel-budget: could not write spans to %s", self.path, exc_info=True)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _open(self) -> IO[str] | None:
        """The span file, opened for appending without ever blocking (a FIFO without a reader would hang the
        exporter, and `shutdown()` with it); anything but a regular file is refused, with one warning. A new file
        is created 0600 while content capture is on (its spans may hold prompts and completions)."""
        mode = 0o600 if capture_on() else 0o666  # the umask applies to the latter
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, mode)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: a FIFO nobody reads
                raise
            self._refuse(stat.S_IFIFO)
            return None
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            os.close(fd)
            self._refuse(found.st_mode)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8")

    def _refuse(self, mode: int) -> None:
        if not self._refused:
            self._refused = True
            log.warning("otel-budget: %s; spans are not written there", _not_a_file(self.path, mode))

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


def _not_a_file(path: str, mode: int) -> str:
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    return (f"FileSpanExporter: {path!r} is {kind}, not a regular file; give the path of a span file (it is "
            "created if missing), e.g. FileSpanExporter('runs.jsonl')")


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
