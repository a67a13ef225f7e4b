"""Names from DESIGN.md ("Telemetry names") that the ops configs may use, and helpers to check PromQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_CONFIG = ROOT / "collector-config" / "otelcol.yaml"
GRAFANA = ROOT / "grafana"
DATASOURCES = GRAFANA / "provisioning" / "datasources"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards"
ALERTING = GRAFANA / "provisioning" / "alerting"
DASHBOARDS = GRAFANA / "dashboards"
PROMETHEUS_DIR = GRAFANA / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
COMPOSE = ROOT / "docker-compose.yaml"

# Series as Prometheus shows them after the OTel Prometheus/OTLP export (DESIGN.md, "Metrics").
CONTRACT_SERIES = frozenset(
    {
        "otel_budget_cost_usd_total",
        "otel_budget_runs_total",
        "otel_budget_run_utilization",
        "otel_budget_runs_near_cap_total",
        "otel_budget_runs_awaiting_approval",
        *(f"gen_ai_client_token_usage_{s}" for s in ("bucket", "count", "sum")),
        *(f"gen_ai_client_operation_duration_seconds_{s}" for s in ("bucket", "count", "sum")),
    }
)
# Labels of those series: the contract's, the GenAI histograms' semconv attributes, and Prometheus' own.
CONTRACT_LABELS = frozenset(
    {
        "run_name",
        "stop_reason",
        "dimension",
        "gen_ai_request_model",
        "gen_ai_provider_name",
        "gen_ai_token_type",
        "gen_ai_operation_name",
        "le",
        "job",
        "instance",
    }
)

# Grafana's built-in and this dashboard's variables, replaced by values that keep PromQL valid.
GRAFANA_VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "run_name": ".*",
    "token_type": "output",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def load_yaml(path: Path) -> Any:
    """Parse one YAML file."""
    return yaml.safe_load(path.read_text())


def substitute_grafana_variables(expr: str) -> str:
    """Replace $var / ${var} by sample values; an unknown variable raises KeyError."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return GRAFANA_VARIABLES[name]

    return _VARIABLE.sub(repl, expr)


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """Parse PromQL; return (metric names selected, label names used in matchers and groupings)."""
    ast = promql_parser.parse(expr)
    metrics: set[str] = set()
    labels: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                metrics.add(node.name)
            labels.update(m.name for m in node.matchers.matchers)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels.update(node.modifier.labels)

    promql_parser.walk(ast, visit)
    return metrics, labels


def normalize_promql(expr: str) -> str:
    """The canonical text of a PromQL expression, to compare two spellings."""
    return str(promql_parser.parse(expr))
