"""Small hand-written tool loops over the real SDKs (chat, Responses, Anthropic), for the progress tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from otel_budget.testing import ScriptedLLM, ToolCall, Turn

Tools = dict[str, Callable[..., Any]]


def chat_loop(oai: Any, tools: Tools, turns: int = 30) -> str | None:
    """Ask, run the tools the model asks for, send their results back; the model's final text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "collect the invoices"}]
    for _ in range(turns):
        msg = oai.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=50).choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True))
        for tc in msg.tool_calls:
            out = tools[tc.function.name](**json.loads(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": str(out)})
    return None


def responses_loop(oai: Any, tools: Tools, turns: int = 30) -> str | None:
    items: list[Any] = [{"role": "user", "content": "collect the invoices"}]
    for _ in range(turns):
        resp = oai.responses.create(model="gpt-4o", input=items, max_output_tokens=50)
        calls = [o for o in resp.output if o.type == "function_call"]
        if not calls:
            return str(resp.output_text)
        items += [o.model_dump(exclude_none=True) for o in resp.output]
        for c in calls:
            out = tools[c.name](**json.loads(c.arguments))
            items.append({"type": "function_call_output", "call_id": c.call_id, "output": str(out)})
    return None


def anthropic_loop(anth: Any, tools: Tools, turns: int = 30) -> str | None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "collect the invoices"}]
    for _ in range(turns):
        resp = anth.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=messages)
        uses = [b for b in resp.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in resp.content if b.type == "text")
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": str(tools[b.name](**b.input))} for b in uses
        ]})
    return None


LOOPS = {"chat": chat_loop, "responses": responses_loop, "anthropic": anthropic_loop}


def model_requests(llm: ScriptedLLM, api: str = "") -> int:
    """Model requests that reached the server."""
    return sum(1 for r in llm.requests if r.api.startswith(api))


def script(llm: ScriptedLLM, actions: list[tuple[str, dict[str, Any]]], final: str = "done") -> None:
    """The model asks for these tool calls, one a turn, then answers `final`."""
    llm.script(*[Turn(tool_calls=[ToolCall(name, args)]) for name, args in actions], Turn(text=final))
