"""Anthropic Messages API wire shapes, plain and streamed."""

from __future__ import annotations

import json
from typing import Any

from .sse import Event
from .turns import Plan, Turn, split_args, split_text

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error JSON."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def usage(plan: Plan, output_tokens: int | None = None) -> dict[str, Any]:
    """Anthropic usage: ``input_tokens`` EXCLUDES cache reads and writes."""
    return {
        "input_tokens": max(0, plan.input_tokens - plan.cache_read_tokens - plan.cache_write_tokens),
        "cache_read_input_tokens": plan.cache_read_tokens,
        "cache_creation_input_tokens": plan.cache_write_tokens,
        "output_tokens": plan.output_tokens if output_tokens is None else output_tokens,
    }


def _stop_reason(plan: Plan) -> str:
    return {"length": "max_tokens", "tool": "tool_use", "stop": "end_turn"}[plan.stop_kind]


def _blocks(plan: Plan) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if plan.text or not plan.tool_calls:
        blocks.append({"type": "text", "text": plan.text})
    blocks += [
        {"type": "tool_use", "id": tc.id, "name": tc.name, "input": tc.arguments} for tc in plan.tool_calls
    ]
    return blocks


def message(plan: Plan, mid: str) -> dict[str, Any]:
    """A non-streamed ``message``."""
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": _blocks(plan),
        "stop_reason": _stop_reason(plan),
        "stop_sequence": None,
        "usage": usage(plan),
    }


def message_stream(plan: Plan, mid: str, turn: Turn) -> list[Event]:
    """``message_start`` -> content blocks with deltas -> ``message_delta`` -> ``message_stop``."""
    start: dict[str, Any] = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage(plan, output_tokens=min(1, plan.output_tokens)),
    }
    raw: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(_blocks(plan)):
        if block["type"] == "text":
            raw.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in split_text(plan.text, turn.chunks):
                raw.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw.append({"type": "content_block_start", "index": index, "content_block": head})
            for piece in split_args(json.dumps(block["input"])):
                raw.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        raw.append({"type": "content_block_stop", "index": index})
    raw.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(plan), "stop_sequence": None},
            "usage": {"output_tokens": plan.output_tokens},
        }
    )
    raw.append({"type": "message_stop"})
    return [(event["type"], event) for event in raw]
