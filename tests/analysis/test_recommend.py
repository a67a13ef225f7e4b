"""`otel-budget recommend` over 500 generated runs with a known distribution, read back from OTLP/JSON lines."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from otel_budget import cli
from otel_budget.analysis import percentile, suggest_cap

from ._spans import run_attributes, write_runs

# 500 successful runs: steps 1..94 five times each, 25 runs of 96 and 5 long ones of 1000 (a known heavy tail).
# Sorted, the values at ranks 474 and 475 (p95 = rank 474.05) are both 96.
STEPS = [i % 94 + 1 for i in range(470)] + [96] * 25 + [1000] * 5


def _runs():
    for steps in STEPS:
        yield run_attributes("invoice-agent", "done", steps, tool_calls=steps // 2, seconds=steps * 0.5,
                             tokens=steps * 1000, usd=steps * 0.001)
    for _ in range(12):
        yield run_attributes("invoice-agent", "steps", 40, 20, 20.0, 40000, 0.04, limit="max_steps")
    for _ in range(3):
        yield run_attributes("invoice-agent", "cost", 30, 15, 15.0, 30000, 0.80, limit="max_usd")
    yield run_attributes("invoice-agent", "error", 2, 0, 1.0, 2000, 0.002)
    for _ in range(5):
        yield run_attributes("triage", "done", 3, 1, 2.0, 3000, 0.003)


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "runs.jsonl"
    ids = write_runs(path, _runs())
    return path, ids


def _recommend(capsys, path) -> dict:
    assert cli.main(["recommend", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_recommend_yields_the_expected_p95_and_caps(trace_file, capsys):
    path, _ = trace_file
    result = _recommend(capsys, path)
    agent = result["invoice-agent"]
    assert (agent["runs"], agent["done"], agent["stopped_at_limit"], agent["other"]) == (516, 500, 15, 1)
    steps = agent["dimensions"]["steps"]
    # Reference: numpy-style linear quantiles (statistics' "inclusive" method), computed independently.
    expected_p95 = statistics.quantiles(STEPS, n=20, method="inclusive")[18]
    assert expected_p95 == pytest.approx(96.0)
    assert steps["p95"] == pytest.approx(expected_p95)
    assert steps["p50"] == pytest.approx(statistics.median(STEPS))
    assert steps["max"] == 1000
    assert steps["cap"] == 240  # 2.5 x 96
    assert steps["cut"] == 5  # the five 1000-step runs would have been stopped
    assert agent["dimensions"]["usd"]["cut"] == 5
    assert agent["dimensions"]["tool_calls"]["cap"] == 120  # 2.5 x 48
    assert agent["dimensions"]["seconds"]["cap"] == 120  # 2.5 x 48 s
    assert agent["dimensions"]["total_tokens"]["cap"] == 240_000
    assert agent["dimensions"]["usd"]["cap"] == pytest.approx(0.24)
    assert agent["budget"] == {
        "max_steps": 240, "max_tool_calls": 120, "max_seconds": 120, "max_total_tokens": 240000, "max_usd": 0.24,
    }
    assert not agent["few_runs"]
    assert result["triage"]["few_runs"] is True


def test_runs_stopped_at_a_limit_are_listed_as_eval_cases(trace_file, capsys):
    path, ids = trace_file
    cases = _recommend(capsys, path)["invoice-agent"]["eval_cases"]
    assert [c["trace_id"] for c in cases] == ids[500:515]
    assert {(c["stop_reason"], c["limit"]) for c in cases} == {("steps", "max_steps"), ("cost", "max_usd")}


def test_recommend_text_shows_a_budget_to_paste(trace_file, capsys):
    path, ids = trace_file
    assert cli.main(["recommend", str(path)]) == 0
    out = capsys.readouterr().out
    assert "suggested: Budget(max_steps=240, max_tool_calls=120, max_seconds=120, max_total_tokens=240000, " \
           "max_usd=0.24)" in out
    assert ids[500] in out
    assert "only 5 successful runs" in out


@pytest.mark.parametrize(
    ("dim", "p95", "cap"),
    [("steps", 9.2, 23), ("steps", 0.1, 1), ("seconds", 37.3, 94), ("seconds", 101.0, 260),
     ("total_tokens", 12345, 31000), ("usd", 0.0123, 0.031), ("usd", 0.33, 0.83), ("tool_calls", 0, None)],
)
def test_caps_are_rounded_sensibly(dim, p95, cap):
    got = suggest_cap(dim, p95)
    assert got == (pytest.approx(cap) if isinstance(cap, float) else cap)


def test_percentile_interpolates_between_ranks():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.95) == 5.0
    assert math.isclose(percentile(list(map(float, range(1, 101))), 0.95), 95.05)
