"""A pydantic-ai agent under a budget, offline against ScriptedLLM.

A research agent (pydantic-ai's OpenAI chat model, one tool) looks up papers. The budget is a pydantic-ai
capability given to the run (`capabilities=[BudgetLimits(Budget(...))]`). The model keeps looking up new
queries, so the run is stopped by its money cap before the call that would break it, and `agent.run_sync()`
returns a normal result whose output is the wrap-up instead of raising::

    python examples/pydantic_ai_example.py
"""

from __future__ import annotations

import itertools

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import otel_budget
from otel_budget.pydantic_ai import BudgetLimits, outcome
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


def build(base_url: str) -> Agent[None, str]:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url=base_url, api_key="offline"))
    agent: Agent[None, str] = Agent(model, name="paper-researcher", instructions="Survey the literature.",
                                    model_settings={"max_tokens": 400})

    @agent.tool_plain
    def search_papers(query: str) -> str:
        """Search papers by query."""
        return f"3 papers about {query}"

    return agent


def main() -> None:
    otel_budget.instrument(prices={"gpt-4o": otel_budget.Price(input_per_mtok=2.5, output_per_mtok=10.0)})
    with ScriptedLLM() as llm:
        queries = itertools.count(1)
        llm.responder = lambda request: Turn(
            tool_calls=[ToolCall("search_papers", {"query": f"agent budgets, angle {next(queries)}"})],
            input_tokens=2000, output_tokens=400,
        )
        result = build(llm.openai_base_url).run_sync(
            "Survey agent budgets", capabilities=[BudgetLimits(otel_budget.Budget(max_usd=0.05))]
        )
        done = outcome(result)
        assert done is not None
        print("stop:", done.stop_reason.value, done.limit)
        print("model calls sent:", len(llm.requests))
        print(result.output)


if __name__ == "__main__":
    main()
