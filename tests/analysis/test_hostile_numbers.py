"""Hostile numbers and nesting in a trace file (issue 21, item 7): every command reports the line and skips it
like any unreadable line, `--json` is always JSON, and `compare` fails when a figure cannot be compared."""

from __future__ import annotations

import json
import math

import pytest

from otel_budget import cli
from otel_budget.analysis.compare import compare
from otel_budget.analysis.records import RunRecord
from otel_budget.telemetry import semconv as sc

from ._hostile import forge, healthy, otel_budget, run_line, strict_json

DEEP = "[" * 10_000 + "]" * 10_000
USED, LIMIT = sc.USED_PREFIX, sc.LIMIT_PREFIX


def _bad_lines(err: str, path) -> list[int]:
    return [int(line.split(":")[1]) for line in err.splitlines() if line.startswith(f"{path}:")]


@pytest.mark.parametrize("command", [["recommend"], ["report", "--json"], ["diff", "--run-name", "agent"], ["evals"],
                                     ["compare"]])
def test_a_line_nested_10000_deep_is_reported_and_skipped(tmp_path, command):
    lines = healthy(tmp_path / "good.jsonl")
    call = forge(lines[0], sc.GEN_AI_INPUT_MESSAGES, {"stringValue": DEEP})  # captured content, nested 10,000 deep
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join([*lines, DEEP, call]) + "\n")
    args = [*command, str(tmp_path / "good.jsonl"), str(path)] if command == ["compare"] else [*command, str(path)]
    done = otel_budget(*args)
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr, done.stderr
    bad = len(lines) + 1
    assert _bad_lines(done.stderr, path) == [bad, bad + 1], done.stderr
    assert "nested too deeply" in done.stderr
    assert f"2 of {len(lines) + 2} inputs could not be read" in done.stderr
    if command == ["compare"]:
        assert done.returncode == 1  # the runs on the unreadable lines cannot be compared
        assert "could not be read, so their runs cannot be compared" in done.stdout
    else:
        assert done.returncode == 0
    if command == ["report", "--json"]:
        assert strict_json(done.stdout)["total"]["runs"] == 3  # the healthy runs still count


FORGED = {
    "usd NaN": (USED + "usd", {"doubleValue": "NaN"}),
    "usd bare NaN": (USED + "usd", {"doubleValue": math.nan}),  # written as `NaN`, which is not JSON
    "steps Infinity": (USED + "steps", {"doubleValue": "Infinity"}),
    "steps 1e308": (USED + "steps", {"doubleValue": 1e308}),
    "tokens 10**300": (USED + "total_tokens", {"intValue": str(10**300)}),
    "usd above the bound": (USED + "usd", {"doubleValue": 1e13}),  # 10 x the documented bound, MAX_FIGURE
    "usd negative": (USED + "usd", {"doubleValue": -5.0}),
    "cap NaN": (LIMIT + "steps", {"doubleValue": "NaN"}),
}


@pytest.mark.parametrize("case", sorted(FORGED))
@pytest.mark.parametrize("command", [["recommend", "--json"], ["report", "--json"], ["evals", "-o", "-"]])
def test_a_run_with_a_non_finite_or_absurd_number_is_reported_and_skipped(tmp_path, capsys, case, command):
    key, value = FORGED[case]
    lines = healthy(tmp_path / "good.jsonl")
    forged = run_line(lines)
    lines[forged] = forge(lines[forged], key, value)
    lines[-1] = forge(lines[-1], sc.STOP_REASON, {"stringValue": "steps"})  # one run for evals to write
    path = tmp_path / "forged.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert cli.main([*command, str(path)]) == 0
    out, err = capsys.readouterr()
    assert _bad_lines(err, path) == [forged + 1], err
    assert key in err or "not a JSON number" in err
    assert f"1 of {len(lines)} inputs could not be read" in err and "2 runs counted" in err
    docs = [strict_json(line) for line in out.splitlines()] if command[0] == "evals" else [strict_json(out)]
    if command[0] == "report":
        assert docs[0]["total"] == {"runs": 2, "cost_usd": 0.02, "avg_usd": 0.01}
    elif command[0] == "recommend":
        assert docs[0]["agent"]["runs"] == 2 and docs[0]["agent"]["budget"]["max_steps"] == 5
    else:
        assert [d["stop_reason"] for d in docs] == ["steps"]


@pytest.mark.parametrize("key", [sc.GEN_AI_USAGE_INPUT_TOKENS, sc.COST_USD, sc.TURN])
def test_a_model_call_with_an_absurd_number_is_reported_and_skipped(tmp_path, capsys, key):
    lines = healthy(tmp_path / "good.jsonl")
    lines[0] = forge(lines[0], key, {"doubleValue": 1e308})
    path = tmp_path / "forged.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert cli.main(["evals", "-o", "-", str(path)]) == 0  # evals writes nothing: every run ended done
    assert _bad_lines(capsys.readouterr().err, path) == [1]


def test_a_nan_in_an_attribute_no_analysis_reads_keeps_the_line(tmp_path, capsys):
    """Our own exporter writes a NaN attribute as the string "NaN" (the protobuf JSON mapping): a span that
    carries one in an attribute of the application's own is read as usual."""
    lines = healthy(tmp_path / "good.jsonl")
    lines = [forge(line, "app.score", {"doubleValue": "NaN"}) for line in lines]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert cli.main(["report", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    assert strict_json(out)["total"]["runs"] == 3 and "could not be read" not in err


def test_recommend_and_the_html_page_survive_nan_and_1e308(tmp_path):
    """Before: `recommend` raised (NaN into log10, 1e308 x 2.5 into ceil) and the page's histogram asked for
    10^308 bins."""
    lines = healthy(tmp_path / "good.jsonl", runs=4)
    runs = [i for i, line in enumerate(lines) if "invoke_agent" in line]
    lines[runs[0]] = forge(lines[runs[0]], USED + "usd", {"doubleValue": "NaN"})
    lines[runs[1]] = forge(lines[runs[1]], USED + "steps", {"doubleValue": 1e308})
    path = tmp_path / "forged.jsonl"
    path.write_text("\n".join(lines) + "\n")
    page = tmp_path / "report.html"
    done = otel_budget("report", str(path), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert _bad_lines(done.stderr, path) == [runs[0] + 1, runs[1] + 1]
    assert page.read_text().count('src="data:image/png;base64,') == 3
    assert "2 finished runs" in page.read_text()
    done = otel_budget("recommend", str(path))
    assert done.returncode == 0, done.stderr
    assert "agent: 2 runs, 2 done" in done.stdout and "suggested: Budget(max_steps=5" in done.stdout


def test_compare_fails_when_a_cost_cannot_be_read(tmp_path):
    """Before: the NaN sorted as the worst-case cost, `NaN > eps` was false, and compare said PASS."""
    before = tmp_path / "before.jsonl"
    healthy(before)
    lines = healthy(tmp_path / "after-good.jsonl")
    forged = run_line(lines)
    lines[forged] = forge(lines[forged], USED + "usd", {"doubleValue": "NaN"})
    after = tmp_path / "after.jsonl"
    after.write_text("\n".join(lines) + "\n")
    done = otel_budget("compare", str(before), str(after))
    assert done.returncode == 1, done.stdout
    assert f"REGRESSION: 1 of {len(lines)} inputs after the change ({after}) could not be read" in done.stdout
    assert "FAIL" in done.stdout
    done = otel_budget("compare", str(before), str(after), "--json")
    assert done.returncode == 1
    result = strict_json(done.stdout)
    assert result["passed"] is False and len(result["regressions"]) == 1
    # The healthy side: the same runs without the forged one pass.
    assert otel_budget("compare", str(before), str(tmp_path / "after-good.jsonl")).returncode == 0


def test_compare_of_records_with_a_nan_figure_fails_and_names_it():
    """The library call too: a figure that is not a finite number is a regression, not a pass."""
    def runs(usd: float) -> list[RunRecord]:
        return [RunRecord("agent", "done", span_id=f"{i}", used={"steps": 3, "usd": 0.01}) for i in range(3)] + [
            RunRecord("agent", "done", span_id="x", used={"steps": 3, "usd": usd})]

    assert compare(runs(0.01), runs(0.01))["passed"] is True
    result = compare(runs(0.01), runs(math.nan))
    assert result["passed"] is False
    assert result["regressions"] == ["agent: usd cannot be compared: a run after the change recorded a value that "
                                     "is not a finite number"]
    assert "usd" not in result["runs"]["agent"]["after"]["figures"]
    json.dumps(result, allow_nan=False)  # and the result is still JSON
