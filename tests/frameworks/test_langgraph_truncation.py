"""LangGraph + langchain-openai: an answer cut at the output limit the budget set (a token or cost cap, no
`max_tokens` on the model) is not presented as the answer. The graph ends with the wrap-up, as on any stop."""

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
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "graph-cut-model"
PRICE = otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)
CUT = "word " * 2000


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _graph(llm: ScriptedLLM, streaming: bool = False) -> Any:
    # No max_tokens: the enforcer sets the output limit that fits what the budget leaves.
    model = ChatOpenAI(model=MODEL, base_url=llm.openai_base_url, api_key="x", max_retries=0, streaming=streaming)
    bound = model.bind_tools([lookup])

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    async def aagent(state: MessagesState) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent if not streaming else aagent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name="writer")


def _cfg(budget: otel_budget.Budget) -> dict:
    return {"configurable": {"otel_budget": budget}}


def _run_span(otel: Any) -> Any:
    (span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent writer"]
    return span


def test_answer_cut_by_the_token_cap_ends_the_graph_with_the_wrap_up(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(text=CUT, output_tokens=2000))
    out = _graph(scripted_llm).invoke({"messages": [("user", "write")]}, _cfg(otel_budget.Budget(max_total_tokens=200)))
    (request,) = scripted_llm.requests
    sent_limit = request.body["max_completion_tokens"]
    assert 0 < sent_limit < 200  # the enforcer set the limit that cut the answer
    last = out["messages"][-1]
    assert last.type == "ai" and not last.tool_calls
    assert last.content.startswith("Stopped at a limit: max_total_tokens")
    assert "NOT complete" in last.content and "word word" not in last.content
    meta = last.response_metadata["otel_budget"]
    assert meta == {"stop_reason": "tokens", "limit": "max_total_tokens", "run_name": "writer"}
    assert last.usage_metadata["output_tokens"] == sent_limit  # the call's real usage stays on the message
    span = _run_span(otel)
    assert span.attributes["stop.reason"] == "tokens"
    assert span.attributes["otel_budget.used.total_tokens"] <= 200


def test_answer_cut_by_the_cost_cap_ends_the_graph_with_the_wrap_up(scripted_llm: ScriptedLLM, instrument_with: Any,
                                                                     otel: Any) -> None:
    instrument_with(prices={MODEL: PRICE})
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], output_tokens=20), Turn(text=CUT,
                                                                                                   output_tokens=2000))
    out = _graph(scripted_llm).invoke({"messages": [("user", "write")]}, _cfg(otel_budget.Budget(max_usd=0.01)))
    assert len(scripted_llm.requests) == 2
    assert scripted_llm.requests[-1].body["max_completion_tokens"] < 2000
    last = out["messages"][-1]
    assert last.content.startswith("Stopped at a limit: max_usd") and "word word" not in last.content
    assert last.response_metadata["otel_budget"]["stop_reason"] == "cost"
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    span = _run_span(otel)
    assert span.attributes["stop.reason"] == "cost"
    assert span.attributes["otel_budget.used.usd"] <= 0.01


async def test_streamed_answer_cut_by_the_token_cap_ends_with_the_wrap_up(scripted_llm: ScriptedLLM,
                                                                          otel: Any) -> None:
    scripted_llm.script(Turn(text=CUT, output_tokens=2000))
    out = await _graph(scripted_llm, streaming=True).ainvoke({"messages": [("user", "write")]},
                                                            _cfg(otel_budget.Budget(max_output_tokens=50)))
    (request,) = scripted_llm.requests
    assert request.stream and request.body["max_completion_tokens"] == 50
    last = out["messages"][-1]
    assert last.content.startswith("Stopped at a limit: max_output_tokens")
    assert last.response_metadata["otel_budget"]["stop_reason"] == "tokens"
    assert _run_span(otel).attributes["stop.reason"] == "tokens"


def test_answer_cut_by_the_models_own_max_tokens_is_the_models_answer(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(text=CUT, output_tokens=2000))
    model = ChatOpenAI(model=MODEL, base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0, max_tokens=30)
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "agent")
    out = builder.compile(name="writer").invoke({"messages": [("user", "write")]},
                                                _cfg(otel_budget.Budget(max_total_tokens=100_000)))
    last = out["messages"][-1]
    assert "otel_budget" not in last.response_metadata and last.content.startswith("word")
    assert _run_span(otel).attributes["stop.reason"] == "done"


def test_a_cut_answer_outside_a_graph_is_returned_as_it_came(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(text=CUT, output_tokens=2000))
    model = ChatOpenAI(model=MODEL, base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    with otel_budget.run("loop", budget=otel_budget.Budget(max_total_tokens=200)) as run:
        reply = model.invoke("write")
    assert reply.content.startswith("word") and reply.response_metadata["finish_reason"] == "length"
    assert run.outcome.stop_reason == "tokens" and "cut at" in run.outcome.wrap_up
