"""The Claude Code gateway on its own: plain HTTP through it to ScriptedLLM, the paths the CLI rarely takes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytest.importorskip("claude_agent_sdk")

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_gateway import gateway  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_session import Session  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "claude-sonnet-4-5"


def _post(base: str, body: dict[str, Any], session: Session, path: str = "/v1/messages") -> httpx.Response:
    headers = {"x-api-key": "test", "anthropic-version": "2023-06-01", "x-otel-budget-key": session.secret}
    return httpx.post(base + path, json=body, headers=headers)


def test_a_whole_json_response_is_metered_and_a_refused_request_is_answered_with_the_wrap_up(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], input_tokens=40, output_tokens=7)
    body = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    with otel_budget.run("gateway", budget=otel_budget.Budget(max_steps=1)) as run:
        session = Session(run.node, MODEL, scripted_llm.base_url)
        base = gateway().add(session.id, session)
        try:
            first = _post(base, body, session)
            refused = _post(base, body, session)
            counted = _post(base, body, session, "/v1/messages/count_tokens")  # not a model call: passed through
        finally:
            session.close()
    assert first.status_code == 200 and first.json()["content"][0]["name"] == "lookup"
    assert refused.status_code == 200 and refused.json()["stop_reason"] == "end_turn"
    assert refused.json()["content"][0]["text"].startswith("Stopped at a limit: max_steps")
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert [r.path for r in scripted_llm.requests] == ["/v1/messages"]  # count_tokens is not recorded as a call
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "steps"
    assert (outcome.usage.model_calls, outcome.usage.input_tokens, outcome.usage.output_tokens) == (1, 40, 7)
    assert outcome.usage.tool_calls == 1
    (chat,) = [s for s in otel.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 40


def test_a_session_that_ended_is_not_served(scripted_llm: ScriptedLLM, otel: Any) -> None:
    with otel_budget.run("gateway") as run:
        other = Session(run.node, MODEL, scripted_llm.base_url)  # the gateway serves on while one session is open
        gateway().add(other.id, other)
        session = Session(run.node, MODEL, scripted_llm.base_url)
        base = gateway().add(session.id, session)
        session.close()
        try:
            answer = _post(base, {"model": MODEL, "max_tokens": 10, "messages": []}, session)
        finally:
            other.close()
    assert answer.status_code == 404 and answer.headers["x-should-retry"] == "false"
    assert scripted_llm.requests == []
