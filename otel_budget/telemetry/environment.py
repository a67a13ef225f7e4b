"""Setup from the environment, as `opentelemetry-instrument` does it: OTLP export of traces and metrics from the
standard `OTEL_*` variables, and the default budget from `OTEL_BUDGET_DEFAULT`.

Export is configured only when the application set no SDK provider itself and the environment asks for it
(an `OTEL_EXPORTER_OTLP_*ENDPOINT` or an `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` is set); then each
signal uses the exporters its `OTEL_<SIGNAL>_EXPORTER` names (default `otlp`; `none` opts out), found through
the same entry points the OpenTelemetry SDK's configurator uses. A bad setting (`OTEL_BSP_MAX_QUEUE_SIZE=abc`, an
OTLP timeout or compression the exporter refuses) is named, with its value, in a warning and replaced by its
default, so export goes on; an exporter that still cannot be made is logged and skipped, and the other signal is
set up all the same: telemetry never stops the application.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from ..model.budget import Budget
from . import semconv as sc

log = logging.getLogger(__name__)

#: The variables that ask for export; with none of them set nothing is exported.
_ASKS_FOR_EXPORT = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
)
_PROTOCOLS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_GROUPS = {"traces": "opentelemetry_traces_exporter", "metrics": "opentelemetry_metrics_exporter"}

_lock = threading.Lock()
_configured = False


def default_budget() -> Budget | None:
    """The Budget that `OTEL_BUDGET_DEFAULT` (a JSON object of Budget fields) names, or None when unset."""
    raw = os.environ.get(sc.ENV_BUDGET_DEFAULT, "").strip()
    if not raw:
        return None
    example = '\'{"max_steps": 25, "max_usd": 0.80}\''
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{sc.ENV_BUDGET_DEFAULT} is not JSON ({exc}); it must be a JSON object of Budget "
                         f"fields, e.g. {sc.ENV_BUDGET_DEFAULT}={example}") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{sc.ENV_BUDGET_DEFAULT} must be a JSON object of Budget fields, e.g. "
                         f"{sc.ENV_BUDGET_DEFAULT}={example}; got {raw[:60]!r}")
    try:
        return Budget(**fields)
    except (ValidationError, TypeError) as exc:
        raise ValueError(f"{sc.ENV_BUDGET_DEFAULT} holds an invalid Budget: {exc}") from None


def exporter_names(signal: str) -> list[str]:
    """The entry point names of the exporters the environment asks for, for "traces" or "metrics"."""
    if not any(os.environ.get(name, "").strip() for name in _ASKS_FOR_EXPORT):
        return []
    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip() or "otlp"
    if raw.lower() == "none":
        return []
    names = []
    for name in (n.strip() for n in raw.split(",")):
        if name == "otlp":
            protocol = (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
                        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
            if protocol not in _PROTOCOLS:
                log.warning("otel-budget: OTEL_EXPORTER_OTLP_PROTOCOL=%r is not supported (use grpc or "
                            "http/protobuf); no %s are exported", protocol, signal)
                continue
            name = _PROTOCOLS[protocol]
        if name:
            names.append(name)
    return names


def _load(signal: str, name: str) -> Any:
    found = entry_points(group=_GROUPS[signal], name=name)
    for ep in found:
        return ep.load()
    known = sorted(ep.name for ep in entry_points(group=_GROUPS[signal]))
    log.warning("otel-budget: OTEL_%s_EXPORTER names %r, which no installed package provides (installed: %s); "
                "it is skipped", signal.upper(), name, ", ".join(known) or "none")
    return None


def _sdk_provider_set() -> tuple[bool, bool]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    return (isinstance(trace.get_tracer_provider(), TracerProvider),
            isinstance(metrics.get_meter_provider(), MeterProvider))


def configure_export() -> bool:
    """Set global SDK providers that export what the environment asks for, once; True when it set any.

    Does nothing when the application already set an SDK provider (it is used as it is) or the environment
    asks for no export.
    """
    global _configured
    with _lock:
        if _configured:
            return False
        _configured = True
        try:
            return _configure()
        except Exception:  # noqa: BLE001 - telemetry setup never breaks the application
            log.warning("otel-budget: could not configure export from the environment", exc_info=True)
            return False


def _configure() -> bool:
    span_names, metric_names = exporter_names("traces"), exporter_names("metrics")
    if not span_names and not metric_names:
        return False
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    has_tracer, has_meter = _sdk_provider_set()
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    exported = []
    span_exporters = [e for e in (_exporter("traces", n) for n in span_names) if e is not None] if not has_tracer else []
    if span_exporters:
        provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
        batch = batch_settings()
        for exporter in span_exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter, **batch))
        trace.set_tracer_provider(provider)
        exported.append("traces")
    metric_classes = [c for c in (_load("metrics", n) for n in metric_names) if c is not None] if not has_meter else []
    readers = []
    for cls in metric_classes:
        if issubclass(cls, MetricReader):
            readers.append(cls())
        elif (made := _exporter("metrics", cls)) is not None:
            readers.append(PeriodicExportingMetricReader(made))
    if readers:
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
        exported.append("metrics")
    if exported:
        log.info("otel-budget: exporting %s from the OTEL_* environment", " and ".join(exported))
    return bool(exported)


#: The batch span processor's settings: (variable, keyword, the SDK's default).
_BATCH = (("OTEL_BSP_MAX_QUEUE_SIZE", "max_queue_size", 2048), ("OTEL_BSP_SCHEDULE_DELAY", "schedule_delay_millis", 5000),
          ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "max_export_batch_size", 512),
          ("OTEL_BSP_EXPORT_TIMEOUT", "export_timeout_millis", 30000))


def batch_settings() -> dict[str, Any]:
    """BatchSpanProcessor keywords that replace bad OTEL_BSP_* values with the SDK's defaults (the SDK refuses
    them, and the whole trace setup with them); each bad value is named in a warning. Valid ones are the SDK's."""
    given: dict[str, int] = {}
    out: dict[str, Any] = {}
    for var, keyword, default in _BATCH:
        raw = os.environ.get(var, "").strip()
        if not raw:
            continue
        try:
            given[keyword] = int(raw)
        except ValueError:
            given[keyword] = 0
        if given[keyword] <= 0:
            log.warning("otel-budget: %s=%r is not a positive integer; spans are exported with the default, %d",
                        var, raw, default)
            out[keyword] = given[keyword] = default
    queue, batch = given.get("max_queue_size", 2048), given.get("max_export_batch_size", 512)
    if batch > queue:
        out["max_export_batch_size"] = min(512, queue)
        log.warning("otel-budget: OTEL_BSP_MAX_EXPORT_BATCH_SIZE=%r is larger than the queue (%d); spans are exported "
                    "in batches of %d", os.environ.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), queue,
                    out["max_export_batch_size"])
    return out


def _exporter(signal: str, name_or_class: Any) -> Any:
    """An exporter made from its class (or entry point name). One a bad OTEL_EXPORTER_OTLP_* value breaks is
    made again with the default for that setting, each bad value named; if it still fails, it is skipped."""
    cls = _load(signal, name_or_class) if isinstance(name_or_class, str) else name_or_class
    if cls is None:
        return None
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - telemetry setup never breaks the application
        error = exc
    fixes = _otlp_fixes(signal, cls)
    if fixes:
        try:
            return cls(**fixes)
        except Exception as exc:  # noqa: BLE001
            error = exc
    log.warning("otel-budget: the %s exporter %s could not be set up (%s: %s); %s are not exported through it",
                signal, getattr(cls, "__name__", cls), type(error).__name__, error, signal)
    return None


def _otlp_fixes(signal: str, cls: Any) -> dict[str, Any]:
    """Keywords for an OTLP exporter in place of the bad timeout or compression variables (each named once)."""
    fixes: dict[str, Any] = {}
    for var in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = os.environ.get(var, "").strip()
        if raw and not _non_negative(raw):
            log.warning("otel-budget: %s=%r is not a number of seconds; %s are exported with the default, 10 s",
                        var, raw, signal)
            fixes["timeout"] = 10.0
            break
    for var in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"):
        raw = os.environ.get(var, "").strip()
        if raw and raw.lower() not in ("gzip", "deflate", "none"):
            none = _no_compression(cls)
            log.warning("otel-budget: %s=%r is not gzip, deflate or none; %s are exported %s", var, raw, signal,
                        "uncompressed" if none is not None else "without this exporter")
            if none is not None:
                fixes["compression"] = none
            break
    return fixes


def _non_negative(raw: str) -> bool:
    try:
        value = float(raw)
    except ValueError:
        return False
    return value >= 0 and value == value


def _no_compression(cls: Any) -> Any:
    """The "no compression" value of an OTLP exporter's own compression type (gRPC's or HTTP's), else None."""
    try:
        if "grpc" in cls.__module__:
            import grpc

            return grpc.Compression.NoCompression
        from opentelemetry.exporter.otlp.proto.http import Compression

        return Compression.NoCompression
    except Exception:  # noqa: BLE001
        return None
