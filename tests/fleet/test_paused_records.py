"""With a RedisLedger, a paused run's quota, limits and approval gate live in Redis under its run id: an edited
PausedRun JSON (no secret here) can only narrow them. Counted at ScriptedLLM and in the tools that ran."""

from __future__ import annotations

import json

import openai
import pytest
from approval import _agent  # the hand-written tool loop with a gated git_push

import otel_budget
from otel_budget import Budget, InvalidRunState, RedisLedger
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

PUSH = ToolCall("git_push", {"remote": "origin", "branch": "main"})
READ = Turn(tool_calls=[ToolCall("read_file", {"path": "NOTES"})], input_tokens=100, output_tokens=10)


@pytest.fixture(autouse=True)
def _clear_log():
    _agent.EXECUTED.clear()


def _paused(llm: ScriptedLLM, oai: openai.OpenAI) -> dict:
    llm.script(READ, Turn(tool_calls=[PUSH]))
    run = _agent.start(oai, Budget(max_steps=4, approve=["git_push"]))
    assert run.outcome is not None and run.outcome.paused is not None and len(llm.requests) == 2
    return json.loads(run.outcome.paused.model_dump_json())


def _sent_after_resume(llm: ScriptedLLM, oai: openai.OpenAI, saved: dict) -> int:
    before = len(llm.requests)
    llm.default = READ
    _agent.go_on(oai, json.dumps(saved), approved=True)
    return len(llm.requests) - before


@pytest.mark.parametrize("edit", ["none", "usage zeroed", "cap raised", "cap removed", "both"])
def test_an_edited_paused_run_gets_no_more_calls_than_the_record_allows(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI, edit: str
) -> None:
    instrumented(ledger)
    saved = _paused(llm, oai)
    if edit == "none":
        assert saved["run_id"] and ledger.get_record(f"paused:{saved['run_id']}", "paused") is not None
    if edit in ("usage zeroed", "both"):
        saved["usage"] = {}
    if edit in ("cap raised", "both"):
        saved["budget"]["max_steps"] = 100
    if edit == "cap removed":
        del saved["budget"]["max_steps"]
    assert _sent_after_resume(llm, oai, saved) == 2  # what was left at the pause, whatever the JSON says


def test_a_paused_run_can_narrow_its_record(ledger: RedisLedger, instrumented, llm, oai) -> None:
    instrumented(ledger)
    saved = _paused(llm, oai)
    saved["budget"]["max_steps"] = 3
    assert _sent_after_resume(llm, oai, saved) == 1


def test_policy_null_keeps_the_approval_gate_of_the_record(ledger: RedisLedger, instrumented, llm, oai) -> None:
    instrumented(ledger)
    saved = _paused(llm, oai)
    saved["policy"] = None
    saved["budget"]["max_steps"] = 10
    llm.script(Turn(tool_calls=[ToolCall("git_push", {"remote": "origin", "branch": "dev"})]),
               Turn(tool_calls=[ToolCall("git_push", {"remote": "origin", "branch": "prod"})]), Turn(text="done"))
    with otel_budget.resume(json.dumps(saved), approved=True) as run:
        messages = run.state
        _agent.answer_open_calls(messages)
        _agent.loop(oai, run, messages)
    # the approved push ran; the next, unapproved one paused the run again instead of running
    pushes = [args for tool, args in _agent.EXECUTED if tool == "git_push"]
    assert pushes == [{"remote": "origin", "branch": "main"}]
    assert run.outcome is not None and run.outcome.stop_reason == "awaiting_approval"
    assert run.outcome.paused is not None and run.outcome.paused.pending.arguments["branch"] == "dev"


def test_a_paused_run_redis_does_not_know_is_refused(ledger: RedisLedger, instrumented, llm, oai) -> None:
    instrumented(ledger)
    saved = _paused(llm, oai)
    for run_id in ("0" * 32, ""):
        forged = {**saved, "run_id": run_id, "usage": {}}
        with pytest.raises(InvalidRunState, match="not recorded in the shared ledger"):
            _sent_after_resume(llm, oai, forged)
    ledger.client.set(ledger.record_key(f"paused:{saved['run_id']}", "paused"), '{"usage": {"model_calls": -9}}')
    with pytest.raises(InvalidRunState, match="record of the paused run is damaged"):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2


def test_a_pause_without_redis_reachable_is_not_resumed_unchecked(own_redis, prefix, instrumented, llm, oai) -> None:
    store = RedisLedger(own_redis.url, prefix=prefix, reservation_ttl=30)
    instrumented(store)
    saved = _paused(llm, oai)
    own_redis.stop()
    with pytest.raises(InvalidRunState, match="cannot be read"):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2
    store.close()
