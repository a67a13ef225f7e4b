"""ScriptedLLM: test your agent's budget behaviour offline, against the real OpenAI and Anthropic SDKs.

``ScriptedLLM`` is a small stdlib-only HTTP server on 127.0.0.1 that speaks enough of the OpenAI
API (chat completions and the Responses API) and the Anthropic Messages API, streams included, for
the real SDKs to work against it. Each request is answered by the next scripted ``Turn``::

    from openai import OpenAI
    from otel_budget.testing import ScriptedLLM, ToolCall, Turn

    with ScriptedLLM() as llm:
        llm.script(
            Turn(tool_calls=[ToolCall("get_page", {"n": 2})], input_tokens=1200, cache_read_tokens=1000),
            Turn(text="All done.", output_tokens=40),
        )
        llm.default = Turn(status=429, error_message="slow down")  # when the queue runs dry
        client = OpenAI(base_url=llm.openai_base_url, api_key="x", max_retries=0)
        reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.tool_calls[0].function.name == "get_page"
        assert llm.requests[0].body["model"] == "gpt-4o"

    # Anthropic: Anthropic(base_url=llm.anthropic_base_url, api_key="x", max_retries=0)

How a turn is chosen: ``llm.responder(request)`` if set and it returns a Turn; else the next queued
turn (FIFO); else ``llm.default``; else HTTP 500 saying that the script ran out.

Usage on the wire follows each provider: OpenAI's input tokens INCLUDE cached tokens, Anthropic's
``input_tokens`` EXCLUDE cache reads and writes (reported separately). A request whose output limit
(``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) is below the turn's output tokens
gets exactly that many output tokens, a proportionally cut text, no tool calls, and the provider's
"length" finish reason.

Scripted errors (``Turn(status=...)``) come back in the provider's error JSON. The SDKs retry 408,
409, 429 and 5xx answers by themselves, each retry consuming the next turn: create clients with
``max_retries=0`` when you script errors.
"""

from __future__ import annotations

from .server import ScriptedLLM
from .turns import RecordedRequest, ToolCall, Turn

__all__ = ["RecordedRequest", "ScriptedLLM", "ToolCall", "Turn"]
