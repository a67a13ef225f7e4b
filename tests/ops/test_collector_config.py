"""Structural checks of collector-config/otelcol.yaml (no collector binary can run on these machines)."""

from __future__ import annotations

from typing import Any

import pytest

from .contract import COLLECTOR_CONFIG, load_yaml

SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")
# Current otelcol-contrib type names we use; the old spellings still load with a warning, so ban them here.
KNOWN_TYPES = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch", "tail_sampling"},
    "exporters": {"otlp_grpc", "otlp_http", "prometheus", "prometheusremotewrite", "debug"},
    "connectors": {"span_metrics", "forward"},
    "extensions": {"health_check"},
}
DEPRECATED_TYPES = {"exporters": {"otlp", "otlphttp"}, "connectors": {"spanmetrics"}}


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return load_yaml(COLLECTOR_CONFIG)


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def _pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return config["service"]["pipelines"]


def test_every_component_has_a_current_type_name(config: dict[str, Any]) -> None:
    for section in SECTIONS:
        for component_id in config.get(section) or {}:
            kind = _type(component_id)
            assert kind not in DEPRECATED_TYPES.get(section, set()), f"deprecated {section} type {kind!r}"
            assert kind in KNOWN_TYPES[section], f"unknown {section} type {kind!r}"


def test_pipelines_reference_only_defined_components(config: dict[str, Any]) -> None:
    connectors = set(config.get("connectors") or {})
    for name, pipeline in _pipelines(config).items():
        for component_id in pipeline.get("receivers", []):
            assert component_id in set(config["receivers"]) | connectors, f"{name}: {component_id}"
        for component_id in pipeline.get("processors", []):
            assert component_id in config["processors"], f"{name}: {component_id}"
        for component_id in pipeline["exporters"]:
            assert component_id in set(config["exporters"]) | connectors, f"{name}: {component_id}"
    for extension in config["service"].get("extensions", []):
        assert extension in config["extensions"]


def test_every_defined_component_is_used_and_connectors_join_two_pipelines(config: dict[str, Any]) -> None:
    pipelines = _pipelines(config).values()
    used_as_receiver = {c for p in pipelines for c in p.get("receivers", [])}
    used_as_exporter = {c for p in pipelines for c in p["exporters"]}
    used_processors = {c for p in pipelines for c in p.get("processors", [])}
    assert set(config["receivers"]) <= used_as_receiver
    assert set(config["exporters"]) <= used_as_exporter
    assert set(config["processors"]) <= used_processors
    for connector in config["connectors"]:
        assert connector in used_as_receiver and connector in used_as_exporter, connector


def test_otlp_is_received_on_grpc_4317_and_http_4318(config: dict[str, Any]) -> None:
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")


def test_memory_limiter_runs_first_and_batch_last_in_every_pipeline(config: dict[str, Any]) -> None:
    for name, pipeline in _pipelines(config).items():
        processors = pipeline.get("processors", [])
        assert processors and _type(processors[0]) == "memory_limiter", name
        batches = [i for i, p in enumerate(processors) if _type(p) == "batch"]
        assert batches in ([], [len(processors) - 1]), name
    assert any("batch" in p.get("processors", []) for p in _pipelines(config).values())


def test_span_metrics_see_every_span_before_tail_sampling(config: dict[str, Any]) -> None:
    pipelines = _pipelines(config)
    feeding = [p for n, p in pipelines.items() if n.startswith("traces") and "span_metrics" in p["exporters"]]
    assert len(feeding) == 1
    (source,) = feeding
    assert "otlp" in source["receivers"]
    assert not any(_type(p) == "tail_sampling" for p in source.get("processors", []))
    # Its metrics reach an exporter that Prometheus can read.
    metric_sinks = [
        p for n, p in pipelines.items() if n.startswith("metrics") and "span_metrics" in p["receivers"]
    ]
    assert metric_sinks and any(
        _type(e).startswith("prometheus") for p in metric_sinks for e in p["exporters"]
    )


def test_traces_reach_jaeger_only_through_tail_sampling(config: dict[str, Any]) -> None:
    to_jaeger = [p for p in _pipelines(config).values() if any("jaeger" in e for e in p["exporters"])]
    assert to_jaeger
    for pipeline in to_jaeger:
        assert "tail_sampling" in pipeline["processors"]
    for exporter_id in (e for p in to_jaeger for e in p["exporters"] if "jaeger" in e):
        assert _type(exporter_id) in {"otlp_grpc", "otlp_http"}
        assert config["exporters"][exporter_id]["endpoint"].startswith("jaeger:")


def test_app_metrics_over_otlp_reach_the_prometheus_exporter(config: dict[str, Any]) -> None:
    pipelines = [
        p for n, p in _pipelines(config).items() if n.startswith("metrics") and "otlp" in p["receivers"]
    ]
    assert any("prometheus" in p["exporters"] for p in pipelines)


def test_tail_sampling_keeps_stopped_runs_with_a_nil_guard_errors_and_a_small_share(
    config: dict[str, Any],
) -> None:
    policies = {p["type"]: p for p in config["processors"]["tail_sampling"]["policies"]}
    conditions = policies["ottl_condition"]["ottl_condition"]["span"]
    stop = [c for c in conditions if '"stop.reason"' in c]
    assert stop, conditions
    for condition in stop:
        # Without the nil guard, `!= "done"` matches every span that has no stop.reason at all.
        assert 'attributes["stop.reason"] != nil and' in condition
        assert 'attributes["stop.reason"] != "done"' in condition
    assert "ERROR" in policies["status_code"]["status_code"]["status_codes"]
    assert 0 < policies["probabilistic"]["probabilistic"]["sampling_percentage"] <= 25
    assert "always_sample" not in policies


def test_no_deprecated_exporter_settings(config: dict[str, Any]) -> None:
    # Current contrib logs a deprecation warning whenever resource_to_telemetry_conversion is set, even to false;
    # its default (resource attributes kept in target_info) is what the dashboard expects.
    for name, exporter in config["exporters"].items():
        assert "resource_to_telemetry_conversion" not in (exporter or {}), name
