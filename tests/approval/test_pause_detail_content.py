"""With capture off, an approval pause names the tool and its argument signature, never the argument values: in
the stop detail, the wrap-up, the run span, `BudgetExceeded` messages and `otel-budget evals` output. With capture
on, the values may appear. Real openai SDK against ScriptedLLM."""

from __future__ import annotations

import json

import pytest

import otel_budget
from otel_budget import Budget, BudgetExceeded, cli
from otel_budget.core import config
from otel_budget.core.resume import pause
from otel_budget.model.signatures import arguments_signature
from otel_budget.telemetry.exporters import encode_spans_json
from otel_budget.testing import ToolCall, Turn

from . import _agent

SECRET_ARGS = {"remote": "git@intranet.northwind.example:merger-2027.git", "branch": "acquisition-memo"}
VALUES = ("northwind", "merger-2027", "acquisition-memo")
SIG = arguments_signature(SECRET_ARGS)


@pytest.fixture(autouse=True)
def _clear_log():
    _agent.EXECUTED.clear()


def _spans_text(otel) -> str:
    parts = []
    for span in otel.exporter.get_finished_spans():
        parts += [span.name, json.dumps(dict(span.attributes or {}), default=str), span.status.description or ""]
        parts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(parts)


def _leaks(text: str) -> list[str]:
    return [v for v in VALUES if v in text.lower()]


def _pause(llm, oai) -> otel_budget.Run:
    llm.script(Turn(tool_calls=[ToolCall("read_file", {"path": "VERSION"}), ToolCall("git_push", SECRET_ARGS)]))
    run = _agent.start(oai, Budget(max_steps=10, approve=["git_push"]))
    assert run.outcome.stop_reason == "awaiting_approval"
    return run


def _evals(otel, tmp_path, capsys) -> str:
    path = tmp_path / "spans.jsonl"
    path.write_text(encode_spans_json(otel.exporter.get_finished_spans()) + "\n")
    assert cli.main(["evals", str(path)]) == 0
    return capsys.readouterr().out


def test_capture_off_a_pause_names_the_tool_and_the_signature_only(otel, llm, oai, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(config.get(), "capture_content", False)
    run = _pause(llm, oai)
    done = run.outcome
    assert f"git_push(arguments {SIG})" in done.detail
    assert f"git_push(arguments {SIG})" in done.wrap_up
    assert done.paused.pending.arguments == SECRET_ARGS  # the paused run itself keeps them: it is the user's data
    assert not _leaks(done.detail) and not _leaks(done.wrap_up)
    assert not _leaks(_spans_text(otel))
    out = _evals(otel, tmp_path, capsys)
    assert "awaiting_approval" in out and SIG in out and not _leaks(out)


def test_capture_off_a_tool_run_by_code_raises_without_the_values(otel, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", False)
    messages: list[str] = []
    with otel_budget.run("by-code", budget=Budget(approve=["git_push"])) as run:
        try:
            _agent.git_push(**SECRET_ARGS)
        except BudgetExceeded as exc:
            messages.append(str(exc))
            raise
    assert _agent.EXECUTED == []
    assert messages and f"git_push(arguments {SIG})" in messages[0] and not _leaks(messages[0])
    assert not _leaks(run.outcome.wrap_up) and not _leaks(_spans_text(otel))


def test_capture_off_a_denied_call_and_a_framework_pause_name_no_values(otel, llm, oai, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", False)
    first = _pause(llm, oai)
    llm.script(Turn(text="ok"))
    denied = _agent.go_on(oai, first.outcome.paused, approved=False)
    assert denied.outcome.stop_reason == "denied"
    assert f"git_push(arguments {SIG})" in denied.outcome.detail
    assert not _leaks(denied.outcome.detail) and not _leaks(denied.outcome.wrap_up)
    assert "northwind" in denied.rejection  # the answer to the model names the call it made: not telemetry
    with otel_budget.run("framework-pause") as run:
        pause("git_push", SECRET_ARGS)
    assert run.outcome.stop_reason == "awaiting_approval" and SIG in run.outcome.detail
    assert not _leaks(run.outcome.wrap_up) and not _leaks(_spans_text(otel))


def test_capture_on_the_values_may_appear(otel, llm, oai, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", True)
    run = _pause(llm, oai)
    assert "merger-2027" in run.outcome.detail and "merger-2027" in run.outcome.wrap_up


def test_healthy_calls_of_a_gated_tool_still_run_once_approved(otel, llm, oai, monkeypatch):
    monkeypatch.setattr(config.get(), "capture_content", False)
    first = _pause(llm, oai)
    llm.script(Turn(text="Released."))
    resumed = _agent.go_on(oai, first.outcome.paused, approved=True)
    assert resumed.outcome.stop_reason == "done"
    assert _agent.EXECUTED.count(("git_push", SECRET_ARGS)) == 1
