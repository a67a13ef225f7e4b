"""Limit pauses (`Budget(on_limit="pause")`): a call refused by a limit is not sent, the run pauses for a person's
decision, and a resume with larger limits goes on with the quota already used counted (raw openai SDK loops)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import otel_budget
from otel_budget import Budget, BudgetExceeded, PausedRun, StopReason
from otel_budget.testing import ToolCall, Turn

from . import _limit_agent as agent


@pytest.fixture
def priced(llm):
    otel_budget.instrument(prices=agent.PRICES)
    llm.default = Turn(text="invoice read", output_tokens=100)
    yield
    otel_budget.uninstrument()


def _pause_at_cost(oai, llm, cap: float = 0.40) -> otel_budget.Run:
    with otel_budget.run("invoices", budget=Budget(max_usd=cap, on_limit="pause")) as run:
        agent.loop(oai, run)
    return run


def test_a_cost_capped_loop_pauses_and_the_refused_call_is_never_sent(priced, llm, oai):
    run = _pause_at_cost(oai, llm)
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL
    assert out.limit == "max_usd"
    assert out.paused is not None and out.paused.pending is not None
    pending = out.paused.pending
    assert pending.kind == "limit" and pending.limit == "max_usd" and pending.cap == 0.40
    assert pending.used == pytest.approx(out.usage.cost_usd)
    # Only the calls that fit were sent; the refused one never reached the server.
    assert len(llm.requests) == out.usage.model_calls == 3
    assert out.usage.cost_usd <= 0.40
    assert out.wrap_up.startswith("Paused: the run reached max_usd")
    assert "person's decision" in out.wrap_up
    # The same PausedRun JSON as approvals, readable back.
    back = PausedRun.model_validate_json(out.paused.model_dump_json())
    assert back.pending is not None and back.pending.kind == "limit" and back.budget["on_limit"] == "pause"


def test_resume_in_a_new_process_with_a_larger_cap_goes_on_and_never_exceeds_it(priced, llm, oai, tmp_path):
    paused = _pause_at_cost(oai, llm).outcome.paused
    saved = tmp_path / "paused.json"
    saved.write_text(paused.model_dump_json())
    before = len(llm.requests)

    child = subprocess.run(
        [sys.executable, agent.__file__, llm.openai_base_url, str(saved), "approve", "1.60"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert child.returncode == 0, child.stderr
    outcome = json.loads(child.stdout.strip().splitlines()[-1])["outcome"]
    spent = outcome["usage"]["cost_usd"]
    # It went on (more requests reached the server) under the new cap, with the first part's cost counted.
    assert len(llm.requests) > before
    assert outcome["usage"]["model_calls"] == len(llm.requests)
    assert spent <= 1.60
    assert spent > paused.usage.cost_usd
    # The new cap, reached in turn, pauses again (on_limit is kept): it went on until the next call did not fit.
    assert outcome["stop_reason"] == "awaiting_approval" and outcome["limit"] == "max_usd"
    assert outcome["paused"]["pending"]["kind"] == "limit" and outcome["paused"]["pending"]["cap"] == 1.60
    per_call = spent / outcome["usage"]["model_calls"]
    assert spent + per_call > 1.60


def test_a_declined_limit_ends_the_run_with_the_limits_own_reason(priced, llm, oai):
    paused = _pause_at_cost(oai, llm).outcome.paused
    before = len(llm.requests)
    run = agent.go_on(oai, paused, approved=False, budget=None)
    assert run.outcome.stop_reason is StopReason.COST
    assert run.outcome.limit == "max_usd"
    assert run.outcome.paused is None
    assert len(llm.requests) == before
    assert run.outcome.wrap_up.startswith("Stopped at a limit: max_usd")


def test_a_declined_limit_sends_nothing_more_even_under_a_larger_budget(priced, llm, oai):
    paused = _pause_at_cost(oai, llm).outcome.paused
    before = len(llm.requests)
    with otel_budget.resume(paused, approved=False, budget=Budget(max_usd=5.0)) as run:
        for _ in range(3):  # code that asks without looking at run.allows(): each call is refused, not sent
            with pytest.raises(BudgetExceeded):
                agent.ask(oai)
    assert len(llm.requests) == before
    assert run.outcome.stop_reason is StopReason.COST and run.outcome.limit == "max_usd"


@pytest.mark.parametrize("budget", [None, Budget(max_usd=0.40)], ids=["saved-budget", "same-cap"])
def test_a_resume_without_a_larger_budget_pauses_again_at_once(priced, llm, oai, budget):
    first = _pause_at_cost(oai, llm).outcome
    before = len(llm.requests)
    run = agent.go_on(oai, first.paused, approved=True, budget=budget)
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_usd"
    assert len(llm.requests) == before  # no quota grew: nothing more was sent
    assert out.usage.cost_usd == pytest.approx(first.usage.cost_usd)


def test_a_retry_in_the_paused_run_is_not_sent(priced, llm, oai):
    with otel_budget.run("invoices", budget=Budget(max_usd=0.40, on_limit="pause")) as run:
        for _ in range(8):
            try:
                agent.ask(oai)
            except BudgetExceeded as exc:
                assert exc.reason is StopReason.AWAITING_APPROVAL
    assert run.outcome.stop_reason is StopReason.AWAITING_APPROVAL
    assert len(llm.requests) == run.outcome.usage.model_calls == 3


def test_a_child_run_with_a_larger_budget_does_not_grow_the_parents_quota(priced, llm, oai):
    with otel_budget.run("invoices", budget=Budget(max_usd=0.40, on_limit="pause")) as parent:
        with otel_budget.run("page", budget=Budget(max_usd=5.0)) as child:
            agent.loop(oai, child)
        agent.loop(oai, parent)
    assert child.outcome.stop_reason is StopReason.AWAITING_APPROVAL
    assert parent.outcome.stop_reason is StopReason.AWAITING_APPROVAL
    assert parent.outcome.limit == "max_usd"
    assert parent.outcome.paused is not None and parent.outcome.paused.pending.kind == "limit"
    assert len(llm.requests) == parent.outcome.usage.model_calls == 3


def test_a_steps_limit_pauses_and_resumes_with_more_steps(priced, llm, oai):
    with otel_budget.run("steps", budget=Budget(max_steps=2, on_limit="pause")) as run:
        agent.loop(oai, run)
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_steps"
    assert out.paused.pending.kind == "limit" and out.paused.pending.used == 2 and out.paused.pending.cap == 2
    assert len(llm.requests) == 2
    resumed = agent.go_on(oai, PausedRun.model_validate_json(out.paused.model_dump_json()), approved=True,
                          budget=Budget(max_steps=5))
    assert resumed.outcome.stop_reason is StopReason.AWAITING_APPROVAL and resumed.outcome.limit == "max_steps"
    assert len(llm.requests) == resumed.outcome.usage.model_calls == 5


def test_a_time_limit_pauses_before_the_late_call(priced, llm, oai):
    with otel_budget.run("slow", budget=Budget(max_seconds=0.5, on_limit="pause")) as run:
        for _ in range(50):
            agent.ask(oai)
            time.sleep(0.2)
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_seconds"
    assert out.paused.pending.kind == "limit" and out.paused.pending.used >= 0.5
    assert 1 <= len(llm.requests) == out.usage.model_calls < 50
    sent = len(llm.requests)
    resumed = agent.go_on(oai, out.paused, approved=True, budget=Budget(max_seconds=60, max_steps=sent + 2))
    assert resumed.outcome.usage.model_calls == len(llm.requests) == sent + 2
    assert resumed.outcome.limit == "max_steps"


def test_on_limit_stop_is_the_default_and_unchanged(priced, llm, oai):
    assert Budget().on_limit == "stop"
    with otel_budget.run("invoices", budget=Budget(max_usd=0.40)) as run:
        agent.loop(oai, run)
    assert run.outcome.stop_reason is StopReason.COST and run.outcome.limit == "max_usd"
    assert run.outcome.paused is None
    assert len(llm.requests) == 3


def test_old_paused_json_without_a_kind_reads_as_a_tool_approval():
    old = {"run_name": "release", "pending": {"tool": "git_push", "arguments": {"remote": "origin"},
                                              "call_id": "c1", "operation": "git_push", "target": "origin"}}
    paused = PausedRun.model_validate(old)
    assert paused.pending.kind == "tool" and paused.pending.tool == "git_push" and paused.pending.limit is None


def test_on_limit_takes_stop_or_pause_only():
    with pytest.raises(ValueError, match="on_limit"):
        Budget(on_limit="ask")


def test_a_tool_calls_limit_pauses_before_the_next_call_and_no_tool_beyond_it_runs(otel, llm, oai):
    from . import _agent

    _agent.EXECUTED.clear()
    pages = iter(range(1, 1000))
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("read_file", {"path": f"page-{next(pages)}"})])
    run = _agent.start(oai, Budget(max_tool_calls=2, on_limit="pause"), name="reader")
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_tool_calls"
    assert out.paused.pending.kind == "limit" and out.paused.pending.cap == 2 == out.paused.pending.used
    # The third request for a tool went over the limit: it did not run and no model call followed it.
    assert len(llm.requests) == 3 and len(_agent.EXECUTED) == 2
    resumed = _agent.go_on(oai, PausedRun.model_validate_json(out.paused.model_dump_json()), approved=True,
                           budget=Budget(max_tool_calls=4))
    assert resumed.outcome.stop_reason is StopReason.AWAITING_APPROVAL and resumed.outcome.limit == "max_tool_calls"
    # Approved: the request left open at the pause ran, then one more fitted; the 5th request paused again, unrun.
    assert [args["path"] for _, args in _agent.EXECUTED] == ["page-1", "page-2", "page-3", "page-4"]
    assert resumed.outcome.paused.pending.used == 4 == resumed.outcome.paused.pending.cap
    assert resumed.outcome.usage.tool_calls == 4 and len(llm.requests) == resumed.outcome.usage.model_calls == 5


def test_a_token_limit_pauses_and_a_declined_one_ends_tokens(priced, llm, oai):
    with otel_budget.run("tokens", budget=Budget(max_total_tokens=500, on_limit="pause")) as run:
        agent.loop(oai, run)
    out = run.outcome
    assert out.stop_reason is StopReason.AWAITING_APPROVAL and out.limit == "max_total_tokens"
    assert out.usage.total_tokens <= 500 and len(llm.requests) == out.usage.model_calls >= 1
    before = len(llm.requests)
    declined = agent.go_on(oai, out.paused, approved=False, budget=None)
    assert declined.outcome.stop_reason is StopReason.TOKENS and len(llm.requests) == before
