"""LangGraph + langchain-openai for real, over loopback to ScriptedLLM (chat completions via the openai SDK)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "graph-test-model"
executed: list[str] = []


@tool
def lookup(q: str) -> str:
    """Look something up."""
    executed.append(q)
    return f"found {q}"


def _graph(llm: ScriptedLLM, name: str = "researcher", tools: list | None = None, **compile_kwargs: Any) -> Any:
    tools = [lookup] if tools is None else tools
    model = ChatOpenAI(model=MODEL, base_url=llm.openai_base_url, api_key="x", max_retries=0, max_tokens=300)
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name=name, **compile_kwargs)


def _spans(otel: Any, prefix: str = "") -> list:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def _cfg(budget: otel_budget.Budget | None = None, thread: str | None = None) -> dict:
    configurable: dict[str, Any] = {}
    if budget is not None:
        configurable["otel_budget"] = budget
    if thread is not None:
        configurable["thread_id"] = thread
    return {"configurable": configurable}


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


def test_healthy_graph_ends_done_with_one_run_span_and_its_children(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})]), Turn(text="All done."))
    out = _graph(scripted_llm).invoke({"messages": [("user", "find a")]})
    assert out["messages"][-1].content == "All done."
    (run_span,) = _spans(otel, "invoke_agent researcher")
    chats, tools = _spans(otel, "chat "), _spans(otel, "execute_tool lookup")
    assert len(chats) == 2 and len(tools) == 1 and executed == ["a"]
    assert all(s.parent.span_id == run_span.context.span_id for s in chats + tools)
    assert run_span.attributes["stop.reason"] == "done"
    assert run_span.attributes["otel_budget.used.steps"] == 2 == len(scripted_llm.requests)
    assert run_span.attributes["otel_budget.used.tool_calls"] == 1


def test_stuck_graph_is_stopped_by_repeat_and_ends_with_the_wrap_up_message(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    out = _graph(scripted_llm).invoke({"messages": [("user", "loop")]})
    last = out["messages"][-1]
    assert last.type == "ai" and not last.tool_calls
    assert last.content.startswith("Stopped at a limit: max_repeats")
    assert last.response_metadata["otel_budget"]["stop_reason"] == "repeat"
    assert executed == ["same", "same"]
    run_span = _spans(otel, "invoke_agent researcher")[0]
    assert run_span.attributes["stop.reason"] == "repeat"
    assert len(scripted_llm.requests) == len(_spans(otel, "chat ")) == run_span.attributes["otel_budget.used.steps"] == 3
    assert run_span.attributes["otel_budget.used.tool_calls"] == 3


def test_runaway_graph_is_stopped_by_cost_without_overshoot(scripted_llm: ScriptedLLM, instrument_with: Any,
                                                             otel: Any) -> None:
    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)})
    turns = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})], output_tokens=300)
    out = _graph(scripted_llm).invoke({"messages": [("user", "spend")]},
                                      {**_cfg(otel_budget.Budget(max_usd=0.05)), "recursion_limit": 200})
    assert "max_usd" in out["messages"][-1].content
    run_span = _spans(otel, "invoke_agent researcher")[0]
    assert run_span.attributes["stop.reason"] == "cost"
    assert run_span.attributes["otel_budget.used.usd"] <= 0.05
    assert run_span.attributes["otel_budget.used.steps"] == len(scripted_llm.requests) == len(_spans(otel, "chat "))


def _delegating_graph(llm: ScriptedLLM) -> Any:
    sub = _graph(llm, name="sub-researcher")

    @tool
    def research(topic: str) -> str:
        """Delegate research to a sub-agent."""
        return sub.invoke({"messages": [("user", topic)]})["messages"][-1].content

    return _graph(llm, name="lead", tools=[research])


def test_sub_graph_draws_from_the_parent_budget(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall("research", {"topic": "t"})]),
        Turn(tool_calls=[ToolCall("lookup", {"q": "x"})]),
    )
    scripted_llm.default = Turn(text="unexpected")
    out = _delegating_graph(scripted_llm).invoke({"messages": [("user", "go")]}, _cfg(otel_budget.Budget(max_steps=2)))
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"
    (lead,) = _spans(otel, "invoke_agent lead")
    (sub,) = _spans(otel, "invoke_agent sub-researcher")
    assert sub.attributes["stop.reason"] == "steps" and lead.attributes["stop.reason"] == "steps"
    assert sub.context.trace_id == lead.context.trace_id
    assert lead.attributes["otel_budget.used.steps"] == 2 == len(scripted_llm.requests) == len(_spans(otel, "chat "))


def test_delegation_beyond_max_depth_returns_the_delegates_wrap_up(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[ToolCall("research", {"topic": "t"})]), Turn(text="Did it myself."))
    out = _delegating_graph(scripted_llm).invoke({"messages": [("user", "go")]}, _cfg(otel_budget.Budget(max_depth=1)))
    assert out["messages"][-1].content == "Did it myself."
    assert _spans(otel, "invoke_agent sub-researcher")[0].attributes["stop.reason"] == "depth"
    tool_message = out["messages"][-2]
    assert tool_message.type == "tool" and "max_depth" in tool_message.content
    assert len(scripted_llm.requests) == 2


def test_resume_after_interrupt_keeps_the_consumed_quota(scripted_llm: ScriptedLLM, otel: Any) -> None:
    @tool
    def ask_human(question: str) -> str:
        """Ask a person."""
        return str(interrupt(question))

    graph = _graph(scripted_llm, name="approver", tools=[ask_human], checkpointer=InMemorySaver())
    scripted_llm.script(Turn(tool_calls=[ToolCall("ask_human", {"question": "ok?"})]),
                        Turn(tool_calls=[ToolCall("ask_human", {"question": "sure?"})]))
    scripted_llm.default = Turn(text="unexpected")
    cfg = _cfg(otel_budget.Budget(max_steps=2), thread="t1")
    first = graph.invoke({"messages": [("user", "go")]}, cfg)
    assert "__interrupt__" in first
    second = graph.invoke(Command(resume="yes"), cfg)
    assert "__interrupt__" in second  # the second question: still within 2 steps
    third = graph.invoke(Command(resume="yes"), cfg)
    last = third["messages"][-1]
    assert last.response_metadata["otel_budget"]["stop_reason"] == "steps"
    assert len(scripted_llm.requests) == 2  # a fresh quota would have sent a third call
    # An interrupt() is a pause, not a finished run.
    assert [s.attributes["stop.reason"] for s in _spans(otel, "invoke_agent approver")] == [
        "awaiting_approval", "awaiting_approval", "steps"
    ]


async def test_ainvoke_is_a_budgeted_run_too(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    out = await _graph(scripted_llm).ainvoke({"messages": [("user", "loop")]})
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "repeat"
    assert len(scripted_llm.requests) == len(_spans(otel, "chat ")) == 3
