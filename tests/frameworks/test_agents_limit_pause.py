"""A limit pause under the OpenAI Agents SDK, for real over loopback to ScriptedLLM: the refused call is not sent
and the run pauses at the limit; a resume with a larger budget goes on with the quota used counted."""

from __future__ import annotations

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402


@function_tool
def next_page(page: int) -> str:
    """Read a page of invoices."""
    return f"invoices of page {page}"


async def test_a_steps_limit_pauses_the_agent_and_a_resume_with_more_steps_goes_on(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    pages = iter(range(1, 1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("next_page", {"page": next(pages)})])
    agent = Agent(name="invoices", model="agents-test-model", instructions="Read.", tools=[next_page])
    budget = otel_budget.Budget(max_steps=2, on_limit="pause")
    result = await Runner.run(agent, "read all pages", context={"otel_budget": budget}, max_turns=100)
    first = outcome(result)
    assert first is not None and first.stop_reason == "awaiting_approval" and first.limit == "max_steps"
    assert first.paused is not None and first.paused.pending.kind == "limit"
    assert len(scripted_llm.requests) == 2
    assert result.final_output.startswith("Paused: the run reached max_steps")

    with otel_budget.resume(first.paused.model_dump_json(), approved=True,
                            budget=otel_budget.Budget(max_steps=4)) as run:
        await Runner.run(agent, result.to_input_list(), max_turns=100)
    assert run.outcome.stop_reason == "awaiting_approval" and run.outcome.limit == "max_steps"
    assert len(scripted_llm.requests) == run.outcome.usage.model_calls == 4
