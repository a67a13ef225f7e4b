"""Tool arguments nested 5,000 deep (deeper than json, repr or pydantic can walk) under `Budget(approve=[...])`:
the run still pauses before the gated tool, the pause is JSON, and a healthy tool with such arguments runs."""

from __future__ import annotations

import json
from typing import Any

import otel_budget
from otel_budget import Budget, PausedRun
from otel_budget.testing import ToolCall, Turn

DEPTH = 5_000
DEEP_TEXT = '{"payload": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + "}"
SPECS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
         for n in ("git_push", "save")]
ran: list[str] = []


def _deep() -> dict[str, Any]:
    value: dict[str, Any] = {}
    node = value
    for _ in range(DEPTH):
        node["a"] = {}
        node = node["a"]
    return {"payload": value}


@otel_budget.tool
def git_push(payload: Any) -> str:
    ran.append("git_push")
    return "pushed"


@otel_budget.tool
def save(payload: Any) -> str:
    ran.append("save")
    return "saved"


def _loop(oai: Any, budget: Budget) -> otel_budget.Run:
    """Ask until the model answers; tools are never run here (the first request pauses or is answered)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "push it"}]
    with otel_budget.run("deep", budget=budget) as run:
        run.checkpoint(messages)
        for _ in range(3):
            reply = oai.chat.completions.create(model="gpt-4o", messages=messages, tools=SPECS).choices[0].message
            if not reply.tool_calls:
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                              "arguments": tc.function.arguments}}
                for tc in reply.tool_calls]})
            for tc in reply.tool_calls:
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": "done"})
    return run


def test_a_gated_sdk_tool_call_with_5000_deep_arguments_pauses_and_its_pause_is_json(otel, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("git_push", DEEP_TEXT, id="call_deep")]), Turn(text="pushed"))
    run = _loop(oai, Budget(max_steps=5, approve=["git_push"]))
    outcome = run.outcome
    assert outcome.stop_reason == "awaiting_approval", outcome.detail
    assert len(llm.requests) == 1  # nothing more was sent after the model asked for git_push
    pending = outcome.paused.pending
    assert (pending.tool, pending.call_id) == ("git_push", "call_deep")
    assert pending.arguments == DEEP_TEXT  # kept exactly as the model sent it, so approving it matches the call
    text = outcome.paused.model_dump_json()
    restored = PausedRun.model_validate_json(text)
    assert restored.pending.arguments == DEEP_TEXT
    assert "git_push" in outcome.wrap_up


def test_a_healthy_sdk_tool_call_with_5000_deep_arguments_is_not_paused(otel, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("save", DEEP_TEXT)]), Turn(text="saved"))
    run = _loop(oai, Budget(max_steps=5, approve=["git_push"]))
    assert run.outcome.stop_reason == "done", run.outcome.detail
    assert len(llm.requests) == 2


def test_tools_run_with_5000_deep_arguments_are_recorded_and_a_gated_one_pauses(otel):
    ran.clear()
    deep = _deep()
    with otel_budget.run("deep-tools", budget=Budget(approve=["git_push"])) as run:
        assert save(payload=deep["payload"]) == "saved"
        git_push(payload=deep["payload"])
    outcome = run.outcome
    assert ran == ["save"]
    assert outcome.stop_reason == "awaiting_approval", outcome.detail
    paused = outcome.paused
    assert paused.pending.tool == "git_push"
    (record,) = paused.completed
    assert record.tool == "save"
    text = paused.model_dump_json()  # arguments too deep to keep are cut, and say so
    assert "nested deeper than" in text
    restored = PausedRun.model_validate_json(text)
    assert restored.pending.tool == "git_push"
    assert json.loads(text)["pending"]["arguments"]["payload"]["a"]["a"]["a"] is not None
