"""A LangGraph tool-calling agent under a budget, offline against ScriptedLLM.

A research graph (agent node + ToolNode) looks up papers. The budget is passed in the graph's config
(`configurable.otel_budget`). The model keeps looking up new queries, so the run is stopped by its money
cap before the call that would break it, and the graph ends normally with a final AI message carrying
the wrap-up instead of raising::

    python examples/langgraph_example.py
"""

from __future__ import annotations

import itertools
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import SecretStr

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


@tool
def search_papers(query: str) -> str:
    """Search papers by query."""
    return f"3 papers about {query}"


def build(base_url: str) -> Any:
    model = ChatOpenAI(model="gpt-4o", base_url=base_url, api_key=SecretStr("offline"), max_retries=0,
                       max_completion_tokens=400)
    bound = model.bind_tools([search_papers])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([search_papers]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(name="paper-researcher")


def main() -> None:
    otel_budget.instrument(prices={"gpt-4o": otel_budget.Price(input_per_mtok=2.5, output_per_mtok=10.0)})
    with ScriptedLLM() as llm:
        queries = itertools.count(1)
        llm.responder = lambda request: Turn(
            tool_calls=[ToolCall("search_papers", {"query": f"agent budgets, angle {next(queries)}"})],
            input_tokens=2000, output_tokens=400,
        )
        config = {"configurable": {"otel_budget": otel_budget.Budget(max_usd=0.05)}, "recursion_limit": 100}
        out = build(llm.openai_base_url).invoke({"messages": [("user", "Survey agent budgets")]}, config)
        last = out["messages"][-1]
        print("stop:", last.response_metadata["otel_budget"])
        print("model calls sent:", len(llm.requests))
        print(last.content)


if __name__ == "__main__":
    main()
