"""The OpenAI Agents SDK behaves as without us where no otel-budget policy is involved (real SDK over loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from agents.items import ToolCallOutputItem  # noqa: E402
from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

sent: list[str] = []


@function_tool(needs_approval=True)
def send_email(to: str) -> str:
    """Send an e-mail (the SDK's own approval)."""
    sent.append(to)
    return f"sent to {to}"


@pytest.fixture(autouse=True)
def sdk(scripted_llm: ScriptedLLM, otel: Any) -> Iterator[None]:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    sent.clear()
    yield


def _outputs(request: Any) -> list[str]:
    return [str(item["output"]) for item in request.body["input"] if item.get("type") == "function_call_output"]


@pytest.mark.parametrize("rejection_message", [None, "Not today."])
async def test_rejecting_the_sdks_own_interruption_keeps_the_sdks_rejection_text(
    scripted_llm: ScriptedLLM, rejection_message: str | None
) -> None:
    agent = Agent(name="mailer", model="agents-mail-model", tools=[send_email])
    scripted_llm.script(Turn(tool_calls=[ToolCall("send_email", {"to": "bob"})]), Turn(text="done"))
    first = await Runner.run(agent, "mail bob")
    assert outcome(first).stop_reason == "awaiting_approval"  # we pause with the SDK, no policy of ours
    state = first.to_state()
    state.reject(state.get_interruptions()[0], rejection_message=rejection_message)
    resumed = await Runner.run(agent, state)
    expected = rejection_message or DEFAULT_APPROVAL_REJECTION_MESSAGE
    assert resumed.final_output == "done" and sent == []
    assert _outputs(scripted_llm.requests[-1]) == [expected]  # the model was told the SDK's text, not ours
    assert [item.output for item in resumed.new_items if isinstance(item, ToolCallOutputItem)] == [expected]
