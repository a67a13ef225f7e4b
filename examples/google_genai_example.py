"""A google-genai agent with automatic function calling, stopped when it gets stuck; offline (ScriptedLLM).

The SDK runs its own tool loop (automatic function calling). The scripted model asks for the same lookup
over and over; the budget ends the run (`repeat`) before the next model call and the code after the `with`
block prints the wrap-up. ScriptedLLM speaks the Gemini API (`:generateContent`)::

    python examples/google_genai_example.py
"""

from __future__ import annotations

from google import genai
from google.genai import types

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn


def get_order_status(order_id: str) -> str:
    """The status of an order."""
    return "The order system is not answering; try again."


def main() -> None:
    otel_budget.instrument()
    with ScriptedLLM() as llm:
        client = genai.Client(api_key="offline", http_options=types.HttpOptions(base_url=llm.base_url))
        config = types.GenerateContentConfig(tools=[get_order_status])

        llm.script(Turn(tool_calls=[ToolCall("get_order_status", {"order_id": "A-17"})]),
                   Turn(text="Order A-17 is delayed; the system is down."))
        with otel_budget.run("support-agent", budget=otel_budget.Budget(max_steps=10)) as run:
            reply = client.models.generate_content(model="gemini-2.5-flash", contents="Where is A-17?",
                                                   config=config)
        print("healthy run:", run.outcome.stop_reason if run.outcome else None, "->", reply.text)

        llm.default = Turn(tool_calls=[ToolCall("get_order_status", {"order_id": "A-17"})])  # stuck
        with otel_budget.run("support-agent", budget=otel_budget.Budget(max_steps=10)) as run:
            client.models.generate_content(model="gemini-2.5-flash", contents="Where is A-17?", config=config)
        print("stuck run:  ", run.outcome.stop_reason if run.outcome else None)
        print(run.outcome.wrap_up if run.outcome else "")


if __name__ == "__main__":
    main()
