"""An OpenAI Agents SDK agent under a budget, offline against ScriptedLLM.

The agent searches for flights. In the first run the model finishes; in the second it keeps asking the
same search again and again, and the budget stops it (`repeat`) before the next model call is sent: the
run's final output is then the honest wrap-up. Nothing in the agent knows about budgets::

    python examples/openai_agents_example.py
"""

from __future__ import annotations

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI

import otel_budget
from otel_budget.agents import outcome
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


@function_tool
def search_flights(origin: str, destination: str) -> str:
    """Search flights between two airports."""
    return f"No direct flights {origin}-{destination} today; try tomorrow."


def main() -> None:
    otel_budget.instrument(prices={"gpt-4o": otel_budget.Price(input_per_mtok=2.5, output_per_mtok=10.0)})
    set_tracing_disabled(True)  # the SDK's own trace export needs the network; our spans go through OTel
    agent = Agent(name="travel-agent", model="gpt-4o", instructions="Book travel.", tools=[search_flights])
    budget = otel_budget.Budget(max_steps=10, max_usd=0.05)
    with ScriptedLLM() as llm:
        set_default_openai_client(AsyncOpenAI(base_url=llm.openai_base_url, api_key="offline", max_retries=0))
        ask = ToolCall("search_flights", {"origin": "LHR", "destination": "JFK"})

        llm.script(Turn(tool_calls=[ask]), Turn(text="There is no direct flight today; tomorrow has three."))
        result = Runner.run_sync(agent, "Fly me from London to New York", context={"otel_budget": budget})
        healthy = outcome(result)  # None only for a run otel-budget did not see
        print("healthy run:", healthy and healthy.stop_reason, "->", result.final_output)

        llm.default = Turn(tool_calls=[ask])  # the model insists on the very same search
        result = Runner.run_sync(agent, "Fly me from London to New York", context={"otel_budget": budget})
        stuck = outcome(result)
        print("stuck run:  ", stuck and stuck.stop_reason, "->", result.final_output)


if __name__ == "__main__":
    main()
