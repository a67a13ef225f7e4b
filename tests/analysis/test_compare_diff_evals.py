"""`compare`, `diff` and `evals` over span files of real runs (the invoice agent against ScriptedLLM), and the
wrap-up recorded on the run span."""

from __future__ import annotations

import json

import pytest

import otel_budget
from otel_budget import cli
from otel_budget.analysis.sources import read_file
from otel_budget.telemetry import semconv as sc

from ._runs import HEALTHY_STEPS, NAME, record_runs

ROOMY = otel_budget.Budget(max_steps=25, max_usd=0.80)


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """3 healthy runs and 2 on the stuck portal (stopped by the repeat check), all under a roomy budget."""
    path = tmp_path_factory.mktemp("before") / "before.jsonl"
    outcomes = record_runs(path, [(False, ROOMY), (True, ROOMY), (False, ROOMY), (True, ROOMY), (False, ROOMY)])
    assert [o.stop_reason.value for o in outcomes] == ["done", "repeat", "done", "repeat", "done"]
    assert {o.usage.model_calls for o in outcomes if o.completed} == {HEALTHY_STEPS}
    return path, outcomes


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_compare_passes_when_completion_holds_and_worst_cost_does_not_rise(before, tmp_path, capsys):
    path, outcomes = before
    after = tmp_path / "after.jsonl"
    tighter = otel_budget.Budget(max_steps=25, max_usd=0.80, max_repeats=2)  # stops stuck runs one call sooner
    record_runs(after, [(False, tighter), (True, tighter), (False, tighter)])
    assert cli.main(["compare", str(path), str(after), "--json"]) == 0
    result = _json(capsys)
    run = result["runs"][NAME]
    assert (run["before"]["runs"], run["after"]["runs"]) == (5, 3)
    assert run["before"]["completion_rate"] == pytest.approx(0.6)
    assert run["after"]["completion_rate"] == pytest.approx(2 / 3)
    assert run["before"]["stops"] == {"done": 3, "repeat": 2}
    worst_before = max(o.usage.cost_usd for o in outcomes)
    assert run["before"]["figures"]["usd"]["max"] == pytest.approx(worst_before)
    assert run["change"]["usd"]["max"] <= 1e-9  # the worst case is a healthy run, the same on both sides
    assert run["before"]["figures"]["steps"]["max"] == HEALTHY_STEPS
    assert result["passed"] is True and result["regressions"] == []
    assert cli.main(["compare", str(path), str(after)]) == 0
    text = capsys.readouterr().out
    assert "completion rate" in text and "60.0%" in text and "66.7%" in text and "PASS" in text


def test_compare_fails_when_a_cap_cuts_healthy_runs_and_warns_with_the_numbers(before, tmp_path, capsys):
    path, _ = before
    after = tmp_path / "after.jsonl"
    cut = otel_budget.Budget(max_steps=8, max_usd=0.80)  # healthy runs need 10 steps
    outcomes = record_runs(after, [(False, cut), (False, cut)])
    assert {o.stop_reason.value for o in outcomes} == {"steps"}
    assert cli.main(["compare", str(path), str(after), "--json"]) == 1
    result = _json(capsys)
    assert result["passed"] is False
    assert any("completion rate fell from 60.0% to 0.0%" in r for r in result["regressions"])
    warning = next(w for w in result["warnings"] if "max_steps=8" in w)
    assert f"p95 of healthy runs ({HEALTHY_STEPS} steps)" in warning and "3 of 3 of them needed more" in warning


def test_compare_warns_about_a_cap_just_above_healthy_runs(before, tmp_path, capsys):
    path, _ = before
    after = tmp_path / "after.jsonl"
    snug = otel_budget.Budget(max_steps=11, max_usd=0.80)  # fits, but only just: 1.1 x p95
    record_runs(after, [(False, snug), (False, snug), (False, snug)])
    assert cli.main(["compare", str(path), str(after)]) == 0
    captured = capsys.readouterr()
    assert "warning: invoice-agent: max_steps=11 is 1.10x the p95 of healthy runs (10 steps)" in captured.err
    assert "0 of 3 of them needed more" in captured.err and "suggests 25" in captured.err


def test_compare_fails_when_the_worst_case_cost_rises(before, tmp_path, capsys):
    path, _ = before
    after = tmp_path / "after.jsonl"
    # a stuck run now runs to 25 steps (no repeat or stall check)
    loose = otel_budget.Budget(max_steps=25, max_usd=0.80, max_repeats=None, max_stalls=None)
    record_runs(after, [(False, loose), (True, loose)])
    assert cli.main(["compare", str(path), str(after), "--json"]) == 1
    result = _json(capsys)
    assert any("worst-case cost rose" in r for r in result["regressions"])
    assert result["runs"][NAME]["after"]["figures"]["steps"]["max"] == 25


def test_diff_finds_the_turn_where_healthy_and_stuck_runs_part(before, capsys):
    path, outcomes = before
    assert cli.main(["diff", str(path), "--run-name", NAME, "--json"]) == 0
    result = _json(capsys)
    assert result["runs"] == 5
    # open_portal, three read_invoice, then next_page: the same call, but the stuck portal returns page 1 again.
    div = result["divergence"]
    assert div["turn"] == 5
    assert len(result["common"]) == 4 and result["common"][0].startswith("open_portal:")
    healthy = {o.trace_id for o in outcomes if o.completed}
    stuck = {o.trace_id for o in outcomes if not o.completed}
    branches = {frozenset(b["runs"]): b for b in div["branches"]}
    assert set(branches) == {frozenset(healthy), frozenset(stuck)}
    a, b = (branches[frozenset(healthy)]["action"], branches[frozenset(stuck)]["action"])
    assert a.split(" -> ")[0] == b.split(" -> ")[0]  # the same request (next_page, same arguments)...
    assert a != b  # ...with a different result
    assert branches[frozenset(stuck)]["stop_reasons"] == ["repeat"]
    assert cli.main(["diff", str(path), "--run-name", NAME]) == 0
    text = capsys.readouterr().out
    assert "First divergence at turn 5" in text and "branch A (3 runs, ended done)" in text


def test_diff_says_no_divergence_when_runs_agree(tmp_path, capsys):
    path = tmp_path / "same.jsonl"
    record_runs(path, [(False, ROOMY)] * 3)
    assert cli.main(["diff", str(path), "--run-name", NAME]) == 0
    text = capsys.readouterr().out
    assert "No divergence" in text and f"turn  {HEALTHY_STEPS}" in text
    assert cli.main(["diff", str(path), "--run-name", "nobody"]) == 0
    assert "No finished runs named 'nobody'" in capsys.readouterr().out


def test_evals_writes_one_case_per_stopped_run_without_content(before, tmp_path, capsys):
    path, outcomes = before
    out = tmp_path / "cases.jsonl"
    assert cli.main(["evals", str(path), "-o", str(out)]) == 0
    assert "2 eval cases from 5 runs" in capsys.readouterr().err
    cases = [json.loads(line) for line in out.read_text().splitlines()]
    stopped = [o for o in outcomes if not o.completed]
    assert [c["trace_id"] for c in cases] == [o.trace_id for o in stopped]
    case = cases[0]
    assert (case["run_name"], case["stop_reason"], case["limit"]) == (NAME, "repeat", "max_repeats")
    assert case["wrap_up"] == stopped[0].wrap_up and case["wrap_up"].startswith("Stopped at a limit")
    assert len(case["turns"]) == stopped[0].usage.model_calls
    assert case["turns"][0]["actions"][0].startswith("open_portal:")
    assert case["turns"][-2]["results"][0].startswith("next_page:")
    assert "task" not in case and "messages" not in case  # content was not captured


def test_evals_carry_the_task_and_messages_when_content_was_captured(tmp_path, capsys):
    path = tmp_path / "captured.jsonl"
    record_runs(path, [(True, ROOMY)], capture_content=True)
    assert cli.main(["evals", str(path)]) == 0
    (case,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "Northwind" in json.dumps(case["task"])  # the system prompt and task of the first request
    assert case["messages"]["input"] is not None


def test_the_run_span_carries_the_template_wrap_up(before):
    path, outcomes = before
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    values = [
        kv["value"]["stringValue"]
        for doc in spans for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
        for kv in s["attributes"] if kv["key"] == sc.WRAP_UP
    ]
    assert sorted(values) == sorted(o.wrap_up for o in outcomes)


def test_a_model_written_wrap_up_is_recorded_only_with_content(tmp_path):
    budget = otel_budget.Budget(max_steps=3, wrap_up="model")
    for capture in (False, True):
        path = tmp_path / f"model-{capture}.jsonl"
        (outcome,) = record_runs(path, [(True, budget)], capture_content=capture)
        assert "Summary:" in outcome.wrap_up  # the model wrote part of it
        (rec,) = read_file(str(path)).runs
        assert rec.wrap_up is not None and rec.wrap_up.startswith("Stopped at a limit: max_steps")
        assert ("Summary:" in rec.wrap_up) is capture


def test_nothing_readable_exits_non_zero(tmp_path, capsys):
    path = tmp_path / "junk.jsonl"
    path.write_text("{not json\n")
    for argv in (["report", str(path)], ["diff", str(path), "--run-name", NAME], ["evals", str(path)],
                 ["compare", str(path), str(path)], ["recommend", str(path)]):
        assert cli.main(argv) == 2, argv
        assert "nothing could be read" in capsys.readouterr().err
