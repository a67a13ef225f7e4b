"""A new process that decides on an OpenAI Agents SDK run paused at a limit, from the SDK's own JSON.

Usage: python _agents_limit_resume_child.py BASE_URL STATE_FILE approve|reject [MAX_STEPS]. With MAX_STEPS, the
resuming `Runner.run` brings `Budget(max_steps=MAX_STEPS, on_limit="pause")` in its context. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys

import otel_budget
from otel_budget.agents import outcome

otel_budget.instrument()  # before the SDK is imported: patched on its import

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from agents.run_state import RunState  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402


@function_tool
def next_page(page: int) -> str:
    """Read a page of invoices."""
    return f"invoices of page {page}"


async def main(base_url: str, state_file: str, decision: str, max_steps: str | None) -> None:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0))
    agent = Agent(name="invoices", model="agents-test-model", instructions="Read.", tools=[next_page])
    with open(state_file, encoding="utf-8") as f:
        state = await RunState.from_string(agent, f.read())
    item = state.get_interruptions()[0]
    state.approve(item) if decision == "approve" else state.reject(item)
    context = {"otel_budget": otel_budget.Budget(max_steps=int(max_steps), on_limit="pause")} if max_steps else None
    result = await Runner.run(agent, state, context=context)
    done = outcome(result)
    print(json.dumps({
        "stop_reason": done.stop_reason.value if done else None,
        "limit": done.limit if done else None,
        "model_calls": done.usage.model_calls if done else None,
        "trace_id": done.trace_id if done else None,
        "final_output": result.final_output,
        "interruptions": [i.tool_name for i in result.interruptions],
        "state": result.to_state().to_json() if result.interruptions else None,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
