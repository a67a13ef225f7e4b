"""A limit pause in a LangGraph graph, for real over loopback to ScriptedLLM: the refused call is not sent, the
graph returns with the wrap-up, the run pauses at the limit; a resume with a larger budget goes on with the quota
used counted."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks.langchain import paused_run  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _graph(llm: ScriptedLLM, name: str) -> Any:
    model = ChatOpenAI(model="graph-test-model", base_url=llm.openai_base_url, api_key="x", max_retries=0,
                       max_tokens=300).bind_tools([lookup])

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name=name)


def test_a_steps_limit_pauses_the_graph_and_a_resume_with_more_steps_goes_on(scripted_llm: ScriptedLLM, otel: Any) -> None:
    queries = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(queries))})])
    graph = _graph(scripted_llm, name="pager")
    out = graph.invoke({"messages": [("user", "go")]},
                       {"configurable": {"otel_budget": otel_budget.Budget(max_steps=2, on_limit="pause"),
                                         "thread_id": "lp1"}})
    meta = out["messages"][-1].response_metadata["otel_budget"]
    assert meta["stop_reason"] == "awaiting_approval" and meta["limit"] == "max_steps"
    assert out["messages"][-1].content.startswith("Paused: the run reached max_steps")
    assert len(scripted_llm.requests) == 2
    (span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent pager"]
    assert span.attributes["stop.reason"] == "awaiting_approval"
    paused = paused_run("lp1")
    assert paused is not None and paused.pending is not None and paused.pending.kind == "limit"

    with otel_budget.resume(paused, approved=True, budget=otel_budget.Budget(max_steps=4)) as run:
        graph.invoke({"messages": out["messages"][:-1]})
    assert run.outcome.stop_reason == "awaiting_approval" and run.outcome.limit == "max_steps"
    assert len(scripted_llm.requests) == run.outcome.usage.model_calls == 4
