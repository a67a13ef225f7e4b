"""`promtool test rules` over every rule unit test file, and `promtool check` of the rules and config."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .contract import DASHBOARDS, PROMETHEUS_DIR, RULES_DIR

TEST_FILES = sorted(RULES_DIR.glob("*.test.yaml"))
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yaml"))


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: run scripts/ensure_services.sh (make test does)")
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_every_rule_file_has_a_unit_test_file() -> None:
    assert RULE_FILES
    tested = {f for t in TEST_FILES for f in yaml.safe_load(t.read_text())["rule_files"]}
    assert {p.name for p in RULE_FILES} <= tested


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    result = _run("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_accepts_rules_and_the_prometheus_config(tmp_path: Path) -> None:
    result = _run("check", "rules", *(p.name for p in RULE_FILES), cwd=RULES_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    # Point the container path of rule_files at this checkout, then check the whole config.
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["rule_files"] = [str(RULES_DIR / Path(p).name) for p in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = _run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout


def test_dashboard_runs_by_stop_reason_counts_series_born_inside_the_range(tmp_path: Path) -> None:
    """The dashboard's range counters count a series that first appears inside the range (increase() cannot)."""
    dashboard = json.loads((DASHBOARDS / "agent-budgets.json").read_text())
    (expr,) = [
        t["expr"] for p in dashboard["panels"] if p["title"] == "Runs by stop reason" for t in p["targets"]
    ]
    expr = expr.replace('run_name=~"$run_name"', 'run_name=~".*"').replace("$__range", "10m")
    series = {
        "done": "0+1x60",  # old and rising: 10 runs in the last 10 minutes
        "steps": "2x35 3x25",  # old, one more stop inside the range
        "repeat": "_x34 1x26",  # born inside the range at 1
        "cost": "_x32 1 1 2x30",  # born inside the range, then one more
    }
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f'otel_budget_runs_total{{run_name="a", stop_reason="{r}"}}', "values": v}
                    for r, v in series.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "40m",
                        "exp_samples": [
                            {"labels": f'{{stop_reason="{r}"}}', "value": n}
                            for r, n in {"done": 10, "steps": 1, "repeat": 1, "cost": 2}.items()
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "dashboard.test.yaml").write_text(yaml.safe_dump(test))
    result = _run("test", "rules", "dashboard.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_waiting_stat_counts_the_runs_waiting_now_over_processes(tmp_path: Path) -> None:
    """The "Waiting for a decision now" stat sums the awaiting gauge over processes and names: a pause in one
    process resumed in another waits no more, a resume alone never counts below 0, and no stop counts."""
    dashboard = json.loads((DASHBOARDS / "agent-budgets.json").read_text())
    (expr,) = [
        t["expr"] for p in dashboard["panels"] if p["title"] == "Waiting for a decision now" for t in p["targets"]
    ]
    expr = expr.replace('run_name=~"$run_name"', 'run_name=~".*"')
    series = {
        ("a", "p1"): "2x60",  # two runs of a paused in process p1 ...
        ("a", "p2"): "0x30 -1x30",  # ... one of them resumed in p2 after 30m
        ("b", "p1"): "_x34 1x26",  # one run of b paused at 34m
        ("c", "p2"): "-1x60",  # a resume whose pausing process is gone: not below 0
    }
    waiting = [
        {"series": f'otel_budget_runs_awaiting_approval{{run_name="{n}", instance="{i}"}}', "values": v}
        for (n, i), v in series.items()
    ]
    stops = [{"series": 'otel_budget_runs_total{run_name="a", stop_reason="cost"}', "values": "_x34 1x26"}]
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": waiting + stops,
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "20m", "exp_samples": [{"labels": "{}", "value": 2}]},
                    {"expr": expr, "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 2}]},
                ],
            },
            {  # nothing paused at all: 0, not "no data"
                "interval": "1m",
                "input_series": stops,
                "promql_expr_test": [{"expr": expr, "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 0}]}],
            },
        ],
    }
    (tmp_path / "dashboard.test.yaml").write_text(yaml.safe_dump(test))
    result = _run("test", "rules", "dashboard.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
