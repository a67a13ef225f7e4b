"""A LangChain v1 `create_agent` agent under a budget, offline against ScriptedLLM.

The budget is a middleware, next to LangChain's own `ModelCallLimitMiddleware`:
`create_agent(..., middleware=[BudgetMiddleware(budget=Budget(...))])`. The model keeps looking up new
queries, so the agent is stopped by its money cap before the call that would break it, and it ends normally
with a final AI message carrying the wrap-up::

    python examples/langchain_agent_example.py
"""

from __future__ import annotations

import itertools

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

import otel_budget
from otel_budget.langchain import BudgetMiddleware
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


@tool
def search_papers(query: str) -> str:
    """Search papers by query."""
    return f"3 papers about {query}"


def main() -> None:
    otel_budget.instrument(prices={"gpt-4o": otel_budget.Price(input_per_mtok=2.5, output_per_mtok=10.0)})
    with ScriptedLLM() as llm:
        queries = itertools.count(1)
        llm.responder = lambda request: Turn(
            tool_calls=[ToolCall("search_papers", {"query": f"agent budgets, angle {next(queries)}"})],
            input_tokens=2000, output_tokens=400,
        )
        model = ChatOpenAI(model="gpt-4o", base_url=llm.openai_base_url, api_key=SecretStr("offline"), max_retries=0,
                           max_completion_tokens=400)
        agent = create_agent(model, [search_papers], name="paper-researcher",
                             middleware=[BudgetMiddleware(budget=otel_budget.Budget(max_usd=0.05))])
        out = agent.invoke({"messages": [HumanMessage("Survey agent budgets")]}, RunnableConfig(recursion_limit=100))
        last = out["messages"][-1]
        print("stop:", last.response_metadata["otel_budget"])
        print("model calls sent:", len(llm.requests))
        print(last.content)


if __name__ == "__main__":
    main()
