"""Stalls through LiteLLM, google-genai (automatic function calling) and LangGraph's ToolNode, with the real
libraries against ScriptedLLM: the 3rd unchanged result stops the run and the 4th model call is never sent."""

from __future__ import annotations

from typing import Any

import pytest

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

LIST = "Page 1 of 17: INV-2026-0400 OPEN 120.00; INV-2026-0401 PAID 80.00; INV-2026-0402 OPEN 95.50"


def _pages(llm: ScriptedLLM, tool: str = "next_page", n: int = 10) -> None:
    llm.script(*[Turn(tool_calls=[ToolCall(tool, {"page": p})]) for p in range(2, 2 + n)], Turn(text="done"))


def test_litellm_loop_stops_stalled(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("litellm")
    from litellm import completion

    _pages(scripted_llm)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "collect"}]
    with otel_budget.run("litellm-stuck") as run:
        for _ in range(10):
            reply = completion(model="openai/gpt-4o", messages=messages, api_base=scripted_llm.openai_base_url,
                               api_key="x", num_retries=0).choices[0].message
            if not reply.tool_calls:
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                              "arguments": tc.function.arguments}}
                for tc in reply.tool_calls]})
            messages += [{"role": "tool", "tool_call_id": tc.id, "content": LIST} for tc in reply.tool_calls]
    assert run.outcome.stop_reason == "stalled" and run.outcome.limit == "max_stalls"
    assert len(scripted_llm.requests) == 3


def _genai(llm: ScriptedLLM, fn: Any) -> Any:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=llm.base_url))
    config = types.GenerateContentConfig(
        tools=[fn], automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=100))
    return lambda: client.models.generate_content(model="gemini-2.5-flash", contents="collect", config=config)


def test_google_genai_automatic_function_calling_stops_stalled(scripted_llm: ScriptedLLM, otel: Any) -> None:
    """The SDK runs the function (counted where it ran) and sends its response, with no call id: counted once."""
    ran: list[int] = []

    def next_page(page: int) -> str:
        """Show the page with this number."""
        ran.append(page)
        return LIST

    _pages(scripted_llm)
    ask = _genai(scripted_llm, next_page)
    with otel_budget.run("gemini-stuck") as run:
        ask()
    assert run.outcome.stop_reason == "stalled"
    assert ran == [2, 3, 4]
    assert len(scripted_llm.requests) == 3  # counted twice, the stop would have come after 2 results


def test_google_genai_changing_results_finish_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    def next_page(page: int) -> str:
        """Show the page with this number."""
        return f"Page {page} of 17"

    _pages(scripted_llm, n=5)
    ask = _genai(scripted_llm, next_page)
    with otel_budget.run("gemini-pages") as run:
        ask()
    assert run.outcome.stop_reason == "done"
    assert len(scripted_llm.requests) == 6


def test_langgraph_tool_node_stops_stalled(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def next_page(page: int) -> str:
        """Show the page with this number."""
        return LIST

    bound = ChatOpenAI(model="gpt-4o", base_url=scripted_llm.openai_base_url, api_key="x",
                       max_retries=0).bind_tools([next_page])
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [bound.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([next_page]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    _pages(scripted_llm)
    out = builder.compile(name="graph-stuck").invoke({"messages": [("user", "collect")]})
    assert len(scripted_llm.requests) == 3
    last = out["messages"][-1]
    assert last.content.startswith("Stopped: no progress (max_stalls). next_page returned the same result 3 times")
    assert last.response_metadata["otel_budget"]["stop_reason"] == "stalled"


async def test_openai_agents_sdk_stops_stalled_with_the_wrap_up_as_final_output(scripted_llm: ScriptedLLM,
                                                                                 otel: Any) -> None:
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    from otel_budget.instrumentation.frameworks.openai_agents import outcome

    ran: list[int] = []

    @function_tool
    def next_page(page: int) -> str:
        """Show the page with this number."""
        ran.append(page)
        return LIST

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    _pages(scripted_llm)
    result = await Runner.run(Agent(name="portal", model="agents-test-model", instructions="Collect.",
                                    tools=[next_page]), "collect")
    done = outcome(result)
    assert done is not None and done.stop_reason == "stalled"
    assert ran == [2, 3, 4]
    assert len(scripted_llm.requests) == 3
    assert result.final_output.startswith("Stopped: no progress (max_stalls).")


def test_pydantic_ai_tool_results_stop_the_run_stalled(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from otel_budget.pydantic_ai import BudgetLimits, outcome

    model = OpenAIChatModel("pai-test-model", provider=OpenAIProvider(base_url=scripted_llm.openai_base_url,
                                                                     api_key="x"))
    agent: Agent[None, Any] = Agent(model, name="pai-portal")
    ran: list[int] = []

    @agent.tool_plain
    def next_page(page: int) -> str:
        """Show the page with this number."""
        ran.append(page)
        return LIST

    _pages(scripted_llm)
    result = agent.run_sync("collect", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=20))])
    assert outcome(result).stop_reason == "stalled"
    assert ran == [2, 3, 4]
    assert len(scripted_llm.requests) == 3
    assert result.output.startswith("Stopped: no progress (max_stalls).")
