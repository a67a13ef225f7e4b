"""A LiteLLM tool loop under a money cap, offline against ScriptedLLM.

The agent pages through search results with `litellm.completion`. The scripted model never stops asking
for the next page, so the budget stops the run (`cost`) before the call that would break `max_usd`; the
code after the `with` block prints the honest wrap-up. `completion` is imported before `instrument()` and
is still metered. LiteLLM fetches its price table from the network at import unless
`LITELLM_LOCAL_MODEL_COST_MAP=True` (set below, before the import)::

    python examples/litellm_example.py
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from litellm import completion  # noqa: E402 - after the environment is set

import otel_budget  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "page": {"type": "integer"}}},
}}]


def research(llm: ScriptedLLM, question: str) -> str:
    """A plain tool loop: nothing in it knows about budgets."""
    messages: list[dict[str, object]] = [{"role": "user", "content": question}]
    while True:
        reply = completion(model="openai/gpt-4o", messages=messages, tools=TOOLS, max_tokens=200,
                           api_base=llm.openai_base_url, api_key="offline").choices[0].message
        if not reply.tool_calls:
            return str(reply.content)
        messages.append(reply.model_dump())
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "10 more results..."})


def main() -> None:
    otel_budget.instrument(prices={"gpt-4o": otel_budget.Price(input_per_mtok=2.5, output_per_mtok=10.0)})
    with ScriptedLLM() as llm:
        pages = iter(range(1, 10_000))
        llm.responder = lambda request: Turn(
            tool_calls=[ToolCall("search", {"query": "solid-state batteries", "page": next(pages)})],
            input_tokens=4000, output_tokens=40,
        )
        with otel_budget.run("researcher", budget=otel_budget.Budget(max_usd=0.10)) as run:
            research(llm, "Summarize the state of solid-state batteries.")
    outcome = run.outcome
    assert outcome is not None
    print(f"stop: {outcome.stop_reason} after {outcome.usage.model_calls} calls, ${outcome.usage.cost_usd:.4f}")
    print(outcome.wrap_up)


if __name__ == "__main__":
    main()
