"""A Claude Agent SDK agent under a money cap: the real Claude Code CLI, offline against ScriptedLLM.

`query()` becomes a budgeted run. The scripted model keeps reading one more page; every model request the
CLI makes goes through otel-budget's loopback gateway, which admits it against the budget before forwarding
it. When the next call's worst case no longer fits, it is not sent: the CLI gets the wrap-up in its place, so
no call breaks `max_usd`, and the result message carries the wrap-up. The CLI comes with the
`claude-agent-sdk` wheel; it is pointed at ScriptedLLM with `ANTHROPIC_BASE_URL`::

    python examples/claude_agent_sdk_example.py
"""

from __future__ import annotations

import tempfile
from typing import Any

import anyio
from claude_agent_sdk import ResultMessage, create_sdk_mcp_server, query, tool

import otel_budget
from otel_budget.claude import BudgetedOptions, outcome
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


@tool("read_page", "Read one page of the report", {"page": int})
async def read_page(args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"page {args['page']}: more of the same"}]}


async def main() -> None:
    otel_budget.instrument()
    home = tempfile.mkdtemp()
    with ScriptedLLM() as llm:
        pages = iter(range(1, 10_000))
        llm.responder = lambda request: Turn(
            tool_calls=[ToolCall("mcp__report__read_page", {"page": next(pages)})],
            input_tokens=3000, output_tokens=60,
        )
        options = BudgetedOptions(
            model="claude-sonnet-4-5",
            mcp_servers={"report": create_sdk_mcp_server("report", tools=[read_page])},
            allowed_tools=["mcp__report__read_page"],
            env={"ANTHROPIC_BASE_URL": llm.anthropic_base_url, "ANTHROPIC_API_KEY": "offline", "HOME": home,
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1000"},
            cwd=home, setting_sources=[],
            otel_budget=otel_budget.Budget(max_usd=0.10),
        )
        async for message in query(prompt="Summarize the whole report.", options=options):
            if isinstance(message, ResultMessage):
                result = message
    done = outcome(result)
    print(f"stop: {done.stop_reason} after {done.usage.model_calls} calls, ${done.usage.cost_usd:.4f} "
          f"(the CLI reported ${result.total_cost_usd:.4f})")
    print(result.result)


if __name__ == "__main__":
    anyio.run(main)
