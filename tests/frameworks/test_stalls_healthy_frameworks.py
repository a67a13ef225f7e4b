"""A healthy agent through every framework path that feeds results to the stall check: five files written, each
answered "ok" (an acknowledgment: at most 64 characters), end `done` with all six model calls sent. LiteLLM,
google-genai (automatic function calling, no call ids), LangGraph's ToolNode, the Agents SDK, pydantic-ai and the
Claude gateway, with the real libraries against ScriptedLLM. (The stuck portal's side: test_stalls_frameworks.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

FILES = 5


def _writes(llm: ScriptedLLM, tool: str = "write_file") -> None:
    llm.script(*[Turn(tool_calls=[ToolCall(tool, {"path": f"src/m{i}.py", "text": f"x = {i}"})])
                 for i in range(FILES)], Turn(text="all written"))


def test_litellm_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("litellm")
    from litellm import completion

    _writes(scripted_llm)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "write"}]
    with otel_budget.run("litellm-writer") as run:
        for _ in range(10):
            reply = completion(model="openai/gpt-4o", messages=messages, api_base=scripted_llm.openai_base_url,
                               api_key="x", num_retries=0).choices[0].message
            if not reply.tool_calls:
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                              "arguments": tc.function.arguments}}
                for tc in reply.tool_calls]})
            messages += [{"role": "tool", "tool_call_id": tc.id, "content": "ok"} for tc in reply.tool_calls]
    assert run.outcome.stop_reason == "done", run.outcome.detail
    assert len(scripted_llm.requests) == FILES + 1


def test_google_genai_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    written: list[str] = []

    def write_file(path: str, text: str) -> str:
        """Write a file."""
        written.append(path)
        return "ok"

    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=scripted_llm.base_url))
    config = types.GenerateContentConfig(
        tools=[write_file], automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=100))
    _writes(scripted_llm)
    with otel_budget.run("gemini-writer") as run:
        client.models.generate_content(model="gemini-2.5-flash", contents="write", config=config)
    assert run.outcome.stop_reason == "done", run.outcome.detail
    assert len(written) == FILES and len(scripted_llm.requests) == FILES + 1


def test_langgraph_tool_node_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        return "ok"

    bound = ChatOpenAI(model="gpt-4o", base_url=scripted_llm.openai_base_url, api_key="x",
                       max_retries=0).bind_tools([write_file])
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [bound.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([write_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    _writes(scripted_llm)
    out = builder.compile(name="graph-writer").invoke({"messages": [("user", "write")]})
    assert len(scripted_llm.requests) == FILES + 1
    assert out["messages"][-1].content == "all written"


async def test_openai_agents_sdk_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("agents")
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    from otel_budget.instrumentation.frameworks.openai_agents import outcome

    written: list[str] = []

    @function_tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        written.append(path)
        return "ok"

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    _writes(scripted_llm)
    result = await Runner.run(Agent(name="writer", model="agents-test-model", instructions="Write.",
                                    tools=[write_file]), "write")
    done = outcome(result)
    assert done is not None and done.stop_reason == "done", done.detail if done else None
    assert len(written) == FILES and len(scripted_llm.requests) == FILES + 1
    assert result.final_output == "all written"


def test_pydantic_ai_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from otel_budget.pydantic_ai import BudgetLimits, outcome

    model = OpenAIChatModel("pai-test-model", provider=OpenAIProvider(base_url=scripted_llm.openai_base_url,
                                                                     api_key="x"))
    agent: Agent[None, Any] = Agent(model, name="pai-writer")
    written: list[str] = []

    @agent.tool_plain
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        written.append(path)
        return "ok"

    _writes(scripted_llm)
    result = agent.run_sync("write", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=20))])
    assert outcome(result).stop_reason == "done", outcome(result).detail
    assert len(written) == FILES and len(scripted_llm.requests) == FILES + 1
    assert result.output == "all written"


def test_claude_gateway_writer_ends_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    """The gateway reads the `tool_result` blocks each request carries, as the Claude CLI sends them."""
    pytest.importorskip("claude_agent_sdk")
    from otel_budget.instrumentation.frameworks._claude_gateway import gateway
    from otel_budget.instrumentation.frameworks._claude_session import Session

    model = "claude-sonnet-4-5"
    _writes(scripted_llm)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "write"}]
    with otel_budget.run("gateway-writer") as run:
        session = Session(run.node, model, scripted_llm.base_url)
        base = gateway().add(session.id, session)
        headers = {"x-api-key": "test", "anthropic-version": "2023-06-01", "x-otel-budget-key": session.secret}
        try:
            for _ in range(FILES + 2):
                answer = httpx.post(base + "/v1/messages", headers=headers,
                                    json={"model": model, "max_tokens": 100, "messages": messages}).json()
                uses = [b for b in answer["content"] if b["type"] == "tool_use"]
                if not uses:
                    break
                messages.append({"role": "assistant", "content": answer["content"]})
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": [{"type": "text", "text": "ok"}]}
                    for b in uses]})
        finally:
            session.close()
    assert run.outcome.stop_reason == "done", run.outcome.detail
    assert answer["content"][0]["text"] == "all written"
    assert len(scripted_llm.requests) == FILES + 1
