"""Structural checks of docker-compose.yaml and the Prometheus config it mounts."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath
from typing import Any

import pytest

from .contract import COLLECTOR_CONFIG, COMPOSE, DATASOURCES, PROMETHEUS_DIR, ROOT, load_yaml


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        mounts.append((source, target))
    return mounts


def _repo_path_for(service: dict[str, Any], container_path: str) -> PurePosixPath | None:
    """The repo path mounted at container_path (file mount, or a file under a directory mount)."""
    for source, target in _mounts(service):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return PurePosixPath(source) / PurePosixPath(container_path).relative_to(target)
    return None


def test_stack_has_collector_jaeger_prometheus_and_grafana(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"otel-collector", "jaeger", "prometheus", "grafana"}
    assert services["jaeger"]["image"] == "jaegertracing/jaeger:2.15.0"
    assert services["otel-collector"]["image"].startswith("otel/opentelemetry-collector-contrib:")


def test_every_image_is_pinned_to_a_version(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        repo, _, tag = service["image"].rpartition(":")
        assert repo and tag and tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {service['image']}"


def test_every_bind_mount_source_exists(compose: dict[str, Any]) -> None:
    count = 0
    for name, service in compose["services"].items():
        for source, _ in _mounts(service):
            assert source.startswith("./"), f"{name}: {source} is not a repo path"
            assert (ROOT / source).exists(), f"{name}: {source} does not exist"
            count += 1
    assert count >= 6


def test_published_ports_bind_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port}"
    published = {str(p).split(":")[1] for s in compose["services"].values() for p in s.get("ports", [])}
    assert {"4317", "4318", "16686", "9090", "3000"} <= published


def test_collector_runs_the_repo_config(compose: dict[str, Any]) -> None:
    service = compose["services"]["otel-collector"]
    (config_arg,) = [a for a in service["command"] if a.startswith("--config=")]
    mounted = _repo_path_for(service, config_arg.removeprefix("--config="))
    assert mounted is not None and ROOT / mounted == COLLECTOR_CONFIG


def test_prometheus_config_rule_glob_finds_rules_and_no_promtool_tests(compose: dict[str, Any]) -> None:
    service = compose["services"]["prometheus"]
    (config_arg,) = [a for a in service["command"] if a.startswith("--config.file=")]
    config_path = _repo_path_for(service, config_arg.removeprefix("--config.file="))
    assert config_path is not None and ROOT / config_path == PROMETHEUS_DIR / "prometheus.yml"
    config = load_yaml(ROOT / config_path)
    found = []
    for pattern in config["rule_files"]:
        directory = _repo_path_for(service, str(PurePosixPath(pattern).parent))
        assert directory is not None, pattern
        found += [
            p for p in (ROOT / directory).iterdir() if fnmatch.fnmatch(p.name, PurePosixPath(pattern).name)
        ]
    assert found
    assert not [p for p in found if p.name.endswith(".test.yaml")]


def test_services_reach_each_other_on_the_configured_names_and_ports(compose: dict[str, Any]) -> None:
    services = compose["services"]
    collector = load_yaml(COLLECTOR_CONFIG)
    prometheus = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
    # Prometheus scrapes the collector's prometheus exporter.
    exporter_port = collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    targets = [t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert f"otel-collector:{exporter_port}" in targets
    # The collector sends traces to the jaeger service's OTLP port.
    jaeger_endpoints = [e["endpoint"] for k, e in collector["exporters"].items() if "jaeger" in k]
    assert jaeger_endpoints and all(e.split(":")[0] in services for e in jaeger_endpoints)
    # Grafana's data sources point at compose services.
    for path in DATASOURCES.glob("*.yaml"):
        for ds in load_yaml(path)["datasources"]:
            host = ds["url"].split("//", 1)[1].split(":")[0]
            assert host in services, ds["url"]


def test_grafana_mounts_every_provisioning_folder_and_the_dashboards(compose: dict[str, Any]) -> None:
    targets = {t: s for s, t in _mounts(compose["services"]["grafana"])}
    for kind in ("datasources", "dashboards", "alerting"):
        assert targets[f"/etc/grafana/provisioning/{kind}"] == f"./grafana/provisioning/{kind}"
    assert targets["/var/lib/grafana/dashboards"] == "./grafana/dashboards"
