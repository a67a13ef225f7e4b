"""A new process that resumes an OpenAI Agents SDK run from the SDK's own JSON (`RunState.to_string()`).

Usage: python _agents_resume_child.py BASE_URL STATE_FILE [approve|reject]. Prints one JSON line: the outcome.
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

executed: list[str] = []


@function_tool
def read_file(path: str) -> str:
    """Read a file."""
    executed.append(f"read_file:{path}")
    return f"contents of {path}"


@function_tool
def git_push(remote: str, branch: str) -> str:
    """Push a branch."""
    executed.append(f"git_push:{remote}/{branch}")
    return f"pushed {branch} to {remote}"


async def main(base_url: str, state_file: str, decision: str) -> None:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0))
    agent = Agent(name="releaser", model="agents-approval-model", instructions="Release.", tools=[read_file, git_push])
    with open(state_file, encoding="utf-8") as f:
        state = await RunState.from_string(agent, f.read())
    item = state.get_interruptions()[0]
    state.approve(item) if decision == "approve" else state.reject(item)
    result = await Runner.run(agent, state)
    done = outcome(result)
    print(json.dumps({
        "stop_reason": done.stop_reason.value if done else None,
        "model_calls": done.usage.model_calls if done else None,
        "trace_id": done.trace_id if done else None,
        "final_output": result.final_output,
        "executed": executed,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "approve"))
