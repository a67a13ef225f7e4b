"""Structural checks of grafana/: data sources, the "Agent budgets" dashboard and the alert rules."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .contract import (
    ALERTING,
    CONTRACT_LABELS,
    CONTRACT_SERIES,
    DASHBOARD_PROVIDERS,
    DASHBOARDS,
    DATASOURCES,
    RULES_DIR,
    load_yaml,
    normalize_promql,
    promql_names,
    substitute_grafana_variables,
)

EXPRESSION_UID = "__expr__"


def _datasources() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DATASOURCES.glob("*.yaml")):
        doc = load_yaml(path)
        assert doc["apiVersion"] == 1
        for ds in doc["datasources"]:
            assert ds["uid"] not in found, f"duplicate uid {ds['uid']}"
            found[ds["uid"]] = ds
    return found


def _dashboards() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, json.loads(p.read_text())) for p in sorted(DASHBOARDS.glob("*.json"))]


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _alert_rules() -> list[dict[str, Any]]:
    rules = []
    for path in sorted(ALERTING.glob("*.yaml")):
        doc = load_yaml(path)
        assert doc["apiVersion"] == 1
        for group in doc["groups"]:
            rules.extend(group["rules"])
    return rules


def _prometheus_rules() -> dict[str, dict[str, Any]]:
    rules = {}
    for path in sorted(RULES_DIR.glob("*.rules.yaml")):
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                rules[rule["alert"]] = rule
    return rules


def _check_contract_promql(expr: str, where: str) -> None:
    metrics, labels = promql_names(substitute_grafana_variables(expr))
    assert metrics, f"{where}: selects no series"
    assert metrics <= CONTRACT_SERIES, f"{where}: not in the contract: {metrics - CONTRACT_SERIES}"
    assert labels <= CONTRACT_LABELS, f"{where}: unknown labels {labels - CONTRACT_LABELS}"


def test_datasources_provision_prometheus_and_jaeger_with_fixed_uids() -> None:
    datasources = _datasources()
    assert datasources["prometheus"]["type"] == "prometheus"
    assert datasources["jaeger"]["type"] == "jaeger"
    exemplar_targets = datasources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert {t["datasourceUid"] for t in exemplar_targets} <= set(datasources)


def test_dashboard_provider_points_at_the_dashboards_mount() -> None:
    (provider_file,) = DASHBOARD_PROVIDERS.glob("*.yaml")
    doc = load_yaml(provider_file)
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_agent_budgets_dashboard_exists_with_unique_panel_ids() -> None:
    dashboards = {d["title"]: d for _, d in _dashboards()}
    dashboard = dashboards["Agent budgets"]
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_every_dashboard_query_uses_a_provisioned_datasource_uid() -> None:
    uids = set(_datasources())
    for path, dashboard in _dashboards():
        for panel in _panels(dashboard):
            if panel["type"] in ("row", "text"):
                continue
            assert panel["datasource"]["uid"] in uids, f"{path.name}: {panel['title']}"
            for target in panel["targets"]:
                assert target["datasource"]["uid"] in uids, f"{path.name}: {panel['title']}"
        for variable in dashboard["templating"]["list"]:
            if "datasource" in variable:
                assert variable["datasource"]["uid"] in uids


def test_every_dashboard_promql_parses_and_names_only_contract_series() -> None:
    checked = 0
    for path, dashboard in _dashboards():
        for panel in _panels(dashboard):
            for target in panel.get("targets", []):
                if target["datasource"]["type"] == "prometheus":
                    _check_contract_promql(target["expr"], f"{path.name} panel {panel['title']!r}")
                    checked += 1
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query" and variable["datasource"]["type"] == "prometheus":
                m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
                assert m, variable["query"]
                _check_contract_promql(m.group(1), f"variable {variable['name']}")
                assert m.group(2) in CONTRACT_LABELS
    assert checked >= 10


def test_dashboard_covers_the_panels_the_issue_asks_for() -> None:
    dashboard = {d["title"]: d for _, d in _dashboards()}["Agent budgets"]
    exprs = {
        p["title"]: " ".join(t.get("expr", "") for t in p.get("targets", [])) for p in _panels(dashboard)
    }

    def has(*fragments: str) -> bool:
        return any(all(f in e for f in fragments) for e in exprs.values())

    assert has("by (gen_ai_request_model)", "rate(otel_budget_cost_usd_total")
    assert has("by (run_name)", "rate(otel_budget_cost_usd_total")
    assert has("by (stop_reason)", "otel_budget_runs_total")
    assert has("by (le)", "gen_ai_client_token_usage_bucket")
    utilization = next(p for p in _panels(dashboard) if "otel_budget_run_utilization" in exprs[p["title"]])
    steps = utilization["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert 0.8 in [s["value"] for s in steps], "utilization panel needs the near line at 0.8"


def test_stopped_runs_table_searches_jaeger_by_stop_reason() -> None:
    dashboard = {d["title"]: d for _, d in _dashboards()}["Agent budgets"]
    tables = [p for p in _panels(dashboard) if p.get("datasource", {}).get("uid") == "jaeger"]
    assert tables
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for table in tables:
        assert table["type"] == "table"
        for target in table["targets"]:
            assert target["queryType"] == "search"
            assert target["tags"].startswith("stop.reason=")
            for name in re.findall(r"\$(\w+)", target["tags"] + target["service"]):
                assert name in variables


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda r: r["uid"])
def test_grafana_alert_rule_queries_parse_and_use_provisioned_uids(rule: dict[str, Any]) -> None:
    uids = set(_datasources()) | {EXPRESSION_UID}
    refs = {d["refId"] for d in rule["data"]}
    assert rule["condition"] in refs
    for item in rule["data"]:
        assert item["datasourceUid"] in uids
        model = item["model"]
        if item["datasourceUid"] == "prometheus":
            _check_contract_promql(model["expr"], rule["title"])
        else:
            assert model["expression"] in refs
    dashboard_uids = {d["uid"]: d for _, d in _dashboards()}
    annotations = rule["annotations"]
    if "__dashboardUid__" in annotations:
        dashboard = dashboard_uids[annotations["__dashboardUid__"]]
        assert int(annotations["__panelId__"]) in {p["id"] for p in _panels(dashboard)}


def test_grafana_alerts_and_prometheus_rules_are_the_same_alerts() -> None:
    prometheus = _prometheus_rules()
    grafana = {r["uid"]: r for r in _alert_rules()}
    pairs = {
        "otel-budget-run-near-cap": "AgentRunNearCap",
        "otel-budget-run-stopped-by-limit": "AgentRunStoppedByLimit",
        "otel-budget-run-awaiting-approval": "AgentRunAwaitingApproval",
    }
    assert set(grafana) == set(pairs) and set(prometheus) == set(pairs.values())
    for uid, alert in pairs.items():
        (query,) = [d["model"]["expr"] for d in grafana[uid]["data"] if d["datasourceUid"] == "prometheus"]
        assert normalize_promql(query) == normalize_promql(prometheus[alert]["expr"]), uid
        assert grafana[uid]["labels"] == prometheus[alert]["labels"]
        assert grafana[uid]["for"] == prometheus[alert].get("for", "0s"), uid
        assert grafana[uid]["annotations"]["summary"] == prometheus[alert]["annotations"]["summary"], uid


@pytest.mark.parametrize("alert", sorted(_prometheus_rules()))
def test_prometheus_rule_names_only_contract_series(alert: str) -> None:
    _check_contract_promql(_prometheus_rules()[alert]["expr"], alert)


def test_near_cap_alert_uses_the_near_line_and_stopped_alert_excludes_done_and_approval() -> None:
    rules = _prometheus_rules()
    assert ">= 0.8" in rules["AgentRunNearCap"]["expr"]
    assert 'stop_reason!~"done|awaiting_approval"' in rules["AgentRunStoppedByLimit"]["expr"]


def test_awaiting_approval_alert_and_stat_count_the_runs_waiting_now_and_say_what_to_do() -> None:
    rule = _prometheus_rules()["AgentRunAwaitingApproval"]
    assert "otel_budget_runs_awaiting_approval" in rule["expr"] and "runs_total" not in rule["expr"]
    assert "sum by (run_name)" in rule["expr"]  # summed over the processes that paused and resumed
    assert "resume or decline" in rule["annotations"]["summary"]
    assert "approved=True" in rule["annotations"]["description"]
    assert "approved=False" in rule["annotations"]["description"]
    (grafana,) = [r for r in _alert_rules() if r["uid"] == "otel-budget-run-awaiting-approval"]
    dashboard = {d["uid"]: d for _, d in _dashboards()}[grafana["annotations"]["__dashboardUid__"]]
    (panel,) = [p for p in _panels(dashboard) if p["id"] == int(grafana["annotations"]["__panelId__"])]
    assert panel["type"] == "stat"
    (target,) = panel["targets"]
    assert "otel_budget_runs_awaiting_approval" in target["expr"] and "$__range" not in target["expr"]
