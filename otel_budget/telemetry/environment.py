"""Setup from the environment, as `opentelemetry-instrument` does it: OTLP export of traces and metrics from the
standard `OTEL_*` variables, and the default budget from `OTEL_BUDGET_DEFAULT`.

Export is configured only when the application set no SDK provider itself and the environment asks for it
(an `OTEL_EXPORTER_OTLP_*ENDPOINT` or an `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` is set); then each
signal uses the exporters its `OTEL_<SIGNAL>_EXPORTER` names (default `otlp`; `none` opts out), found through
the same entry points the OpenTelemetry SDK's configurator uses. A misconfigured exporter is logged and
skipped: telemetry never stops the application.
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
    done = False
    span_classes = [c for c in (_load("traces", n) for n in span_names) if c is not None]
    if span_classes and not has_tracer:
        provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
        for cls in span_classes:
            provider.add_span_processor(BatchSpanProcessor(cls()))
        trace.set_tracer_provider(provider)
        done = True
    metric_classes = [c for c in (_load("metrics", n) for n in metric_names) if c is not None]
    if metric_classes and not has_meter:
        readers = [cls() if issubclass(cls, MetricReader) else PeriodicExportingMetricReader(cls())
                   for cls in metric_classes]
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
        done = True
    if done:
        log.info("otel-budget: exporting %s from the OTEL_* environment", " and ".join(
            s for s, on in (("traces", bool(span_classes) and not has_tracer),
                            ("metrics", bool(metric_classes) and not has_meter)) if on))
    return done
