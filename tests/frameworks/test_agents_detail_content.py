"""A framework hands the wrap-up to the user as its final output: with capture off, a rejected call is named
there by its tool and argument signature, never its argument values (OpenAI Agents SDK, for real)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from otel_budget import Budget  # noqa: E402
from otel_budget.core import config  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402
from otel_budget.model.signatures import arguments_signature  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

ARGS = {"to": "ceo@northwind.example", "subject": "merger-2027 terms"}
pushed: list[dict[str, Any]] = []


@function_tool
def send_email(to: str, subject: str) -> str:
    """Send an e-mail."""
    pushed.append({"to": to, "subject": subject})
    return "sent"


@pytest.fixture(autouse=True)
def sdk(scripted_llm: ScriptedLLM, otel: Any) -> Iterator[None]:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    pushed.clear()
    yield


@pytest.mark.parametrize("capture", [False, True])
async def test_the_final_output_of_a_rejected_call_names_no_argument_values(
    scripted_llm: ScriptedLLM, otel: Any, capture: bool
) -> None:
    config.get().capture_content = capture
    agent = Agent(name="mailer", model="agents-model", instructions="Mail.", tools=[send_email])
    scripted_llm.script(Turn(tool_calls=[ToolCall("send_email", ARGS)]))
    first = await Runner.run(agent, "mail the ceo", context={"otel_budget": Budget(max_steps=5, approve=["send_email"])})
    assert outcome(first).stop_reason == "awaiting_approval"
    state = first.to_state()
    state.reject(state.get_interruptions()[0])
    scripted_llm.default = Turn(text="unexpected")
    result = await Runner.run(agent, state)
    assert outcome(result).stop_reason == "denied" and pushed == []
    text = result.final_output + "".join(
        str(dict(s.attributes or {})) + str([e.attributes for e in s.events]) for s in otel.get_finished_spans())
    if capture:
        assert "northwind" in result.final_output
    else:
        assert f"send_email(arguments {arguments_signature(ARGS)})" in result.final_output
        assert "northwind" not in text and "merger-2027" not in text
