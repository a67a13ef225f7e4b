"""Approval pauses in a hand-written loop over the real openai SDK against ScriptedLLM: pause, resume, quota."""

from __future__ import annotations

import json
import time

import pytest

import otel_budget
from otel_budget import ApprovalPolicy, Budget, PausedRun
from otel_budget.testing import ToolCall, Turn

from . import _agent

PUSH_MAIN = ToolCall("git_push", {"remote": "origin", "branch": "main"})


@pytest.fixture(autouse=True)
def _clear_log():
    _agent.EXECUTED.clear()


def _read(path: str) -> Turn:
    return Turn(tool_calls=[ToolCall("read_file", {"path": path})], input_tokens=100, output_tokens=10)


def _pause_on_push(llm, oai, budget: Budget) -> otel_budget.Run:
    llm.script(_read("CHANGELOG"), Turn(tool_calls=[ToolCall("read_file", {"path": "VERSION"}), PUSH_MAIN]))
    run = _agent.start(oai, budget)
    assert run.outcome is not None and run.outcome.stop_reason == "awaiting_approval"
    return run


def test_run_pauses_before_a_tool_that_needs_approval(otel, llm, oai):
    run = _pause_on_push(llm, oai, Budget(max_steps=25, approve=["git_push"]))
    outcome = run.outcome
    assert not outcome.completed
    # Nothing of the batch that asked for git_push ran; the earlier read did.
    assert _agent.EXECUTED == [("read_file", {"path": "CHANGELOG"})]
    paused = outcome.paused
    assert paused is not None
    assert paused.pending.tool == "git_push"
    assert paused.pending.arguments == {"remote": "origin", "branch": "main"}
    assert paused.pending.target == "origin"
    assert paused.pending.call_id == paused.state[-1]["tool_calls"][1]["id"]
    assert [(r.tool, r.result) for r in paused.completed] == [("read_file", "contents of CHANGELOG")]
    assert paused.usage.model_calls == 2
    assert paused.state[-1]["tool_calls"][1]["function"]["name"] == "git_push"
    assert "Paused" in outcome.wrap_up and "NOT complete" in outcome.wrap_up
    span = otel.run_span("release")
    assert span.attributes["stop.reason"] == "awaiting_approval"
    assert paused.trace_id == format(span.context.trace_id, "032x")


def test_approved_resume_runs_the_call_once_in_the_same_trace(otel, llm, oai):
    first = _pause_on_push(llm, oai, Budget(max_steps=25, approve=["git_push"]))
    paused = first.outcome.paused
    llm.script(Turn(text="Released."))
    run = _agent.go_on(oai, paused, approved=True, by="alice")
    assert run.outcome.stop_reason == "done"
    assert _agent.EXECUTED == [
        ("read_file", {"path": "CHANGELOG"}),
        ("read_file", {"path": "VERSION"}),
        ("git_push", {"remote": "origin", "branch": "main"}),
    ]
    assert run.outcome.usage.model_calls == 3
    assert run.outcome.trace_id == first.outcome.trace_id
    spans = otel.spans("invoke_agent release")
    paused_span, resumed_span = sorted(spans, key=lambda s: s.start_time)
    assert resumed_span.context.trace_id == paused_span.context.trace_id
    assert resumed_span.parent.span_id == paused_span.context.span_id
    assert resumed_span.attributes["otel_budget.approval.decision"] == "approved"
    assert resumed_span.attributes["otel_budget.approval.by"] == "alice"
    assert resumed_span.attributes["stop.reason"] == "done"
    # The tool result reached the model under the id it asked with.
    sent = llm.requests[-1].body["messages"]
    assert {"role": "tool", "tool_call_id": paused.pending.call_id, "content": "pushed main to origin"} in sent


def test_rejected_resume_ends_the_run_denied_without_another_call(otel, llm, oai):
    first = _pause_on_push(llm, oai, Budget(max_steps=25, approve=["git_push"]))
    requests = len(llm.requests)
    run = _agent.go_on(oai, first.outcome.paused, approved=False)
    assert run.outcome.stop_reason == "denied"
    assert len(llm.requests) == requests
    assert all(name != "git_push" for name, _ in _agent.EXECUTED)
    assert "denied" in run.outcome.wrap_up
    resumed = max(otel.spans("invoke_agent release"), key=lambda s: s.start_time)
    assert resumed.attributes["stop.reason"] == "denied"
    assert resumed.attributes["otel_budget.approval.decision"] == "denied"


def test_rejection_with_an_alternative_goes_on_but_never_through_another_tool(otel, llm, oai):
    policy = ApprovalPolicy(operations={"push": ["git_push", "gh_push"]}, alternative="leave the push to a person.")
    first = _pause_on_push(llm, oai, Budget(max_steps=25, approve=policy))
    llm.script(Turn(tool_calls=[ToolCall("gh_push", {"repo": "acme/app", "branch": "main"})]), Turn(text="ok"))
    run = _agent.go_on(oai, first.outcome.paused, approved=False)
    # The model was told, as the rejected call's result, and then tried the same operation another way.
    told = [m for m in llm.requests[2].body["messages"] if m.get("tool_call_id") == first.outcome.paused.pending.call_id]
    assert told and "denied" in told[0]["content"] and "leave the push to a person." in told[0]["content"]
    assert run.outcome.stop_reason == "denied"
    assert "'push'" in run.outcome.detail
    assert [name for name, _ in _agent.EXECUTED if name.endswith("push")] == []
    assert len(llm.requests) == 3  # nothing was sent after the attempt


def test_quota_is_kept_across_the_pause_20_of_25_steps_leave_5(otel, llm, oai):
    llm.script(*[_read(f"file{i}") for i in range(19)], Turn(tool_calls=[PUSH_MAIN]))
    first = _agent.start(oai, Budget(max_steps=25, approve=["git_push"]))
    paused = first.outcome.paused
    assert paused.usage.model_calls == 20
    llm.script(*[_read(f"more{i}") for i in range(10)])
    run = _agent.go_on(oai, PausedRun.model_validate_json(paused.model_dump_json()), approved=True)
    assert run.outcome.stop_reason == "steps"
    assert run.outcome.limit == "max_steps"
    assert run.outcome.usage.model_calls == 25
    assert len(llm.requests) == 25  # 5 after the resume, not 25
    assert run.outcome.usage.tool_calls == paused.usage.tool_calls + 5
    assert run.outcome.usage.input_tokens == paused.usage.input_tokens + 500


def test_approval_does_not_cover_changed_arguments(otel, llm, oai):
    first = _pause_on_push(llm, oai, Budget(max_steps=25, approve=["git_push"]))
    llm.script(Turn(tool_calls=[ToolCall("git_push", {"remote": "origin", "branch": "release"})]))
    run = _agent.go_on(oai, first.outcome.paused, approved=True)
    assert run.outcome.stop_reason == "awaiting_approval"
    again = run.outcome.paused
    assert again.pending.arguments == {"remote": "origin", "branch": "release"}
    pushes = [args for name, args in _agent.EXECUTED if name == "git_push"]
    assert pushes == [{"remote": "origin", "branch": "main"}]
    # The same approved call cannot run a second time either: each approval is used once.
    with otel_budget.resume(again, approved=True) as third:
        _agent.git_push(remote="origin", branch="release")
        _agent.git_push(remote="origin", branch="release")
    assert third.outcome.stop_reason == "awaiting_approval"
    assert [a["branch"] for n, a in _agent.EXECUTED if n == "git_push"] == ["main", "release"]


def test_time_spent_waiting_for_a_person_is_not_run_time(otel, llm, oai):
    first = _pause_on_push(llm, oai, Budget(max_steps=25, max_seconds=60, approve=["git_push"]))
    paused = first.outcome.paused.model_copy(update={"paused_at": time.time() - 3600})  # an hour's wait
    llm.script(Turn(text="Released."))
    run = _agent.go_on(oai, paused, approved=True)
    assert run.outcome.stop_reason == "done"
    assert run.outcome.usage.seconds < 60
    resumed = max(otel.spans("invoke_agent release"), key=lambda s: s.start_time)
    assert resumed.attributes["otel_budget.approval.wait_seconds"] >= 3600


@otel_budget.tool
def fetch_report(quarter: str) -> dict:
    _agent.EXECUTED.append(("fetch_report", {"quarter": quarter}))
    return {"quarter": quarter, "revenue": 12}


@otel_budget.tool
def send_email(to: str, body: str) -> str:
    _agent.EXECUTED.append(("send_email", {"to": to}))
    return "sent"


def _mailer(run: otel_budget.Run) -> otel_budget.Run:
    with run:
        report = fetch_report(quarter="Q3")
        send_email(to="board@example.com", body=json.dumps(report))
    return run


def test_code_driven_steps_resume_without_repeating_work_done(otel):
    first = _mailer(otel_budget.run("mailer", budget=Budget(approve="send_email")))
    paused = first.outcome.paused
    assert first.outcome.stop_reason == "awaiting_approval"
    assert paused.pending.tool == "send_email" and paused.pending.target == "board@example.com"
    second = _mailer(otel_budget.resume(paused.model_dump_json(), approved=True))
    assert second.outcome.stop_reason == "done"
    assert _agent.EXECUTED == [("fetch_report", {"quarter": "Q3"}), ("send_email", {"to": "board@example.com"})]
    assert second.outcome.usage.tool_calls == 2


def test_paused_run_json_round_trip_keeps_everything(otel, llm, oai):
    paused = _pause_on_push(llm, oai, Budget(max_steps=25, max_usd=1.0, approve=["git_push"])).outcome.paused
    again = PausedRun.model_validate_json(paused.model_dump_json())
    assert again == paused
    assert again.make_budget() == Budget(max_steps=25, max_usd=1.0, approve=["git_push"])


def test_budget_accepts_names_a_predicate_or_a_policy():
    assert Budget(approve=["a", "b"]).approve == ApprovalPolicy(tools=("a", "b"))
    assert Budget(approve="a").approve == ApprovalPolicy(tools=("a",))
    shell = Budget(approve=lambda tool, args: "push" if "git push" in args.get("cmd", "") else None).approve
    assert shell.operation("run_shell", '{"cmd": "git push --force"}') == "push"
    assert shell.operation("run_shell", {"cmd": "ls"}) is None
    assert hash(Budget(approve=["a"])) == hash(Budget(approve=("a",)))
