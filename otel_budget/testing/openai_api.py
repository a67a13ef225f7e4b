"""OpenAI wire shapes: chat completions and the Responses API, plain and streamed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .sse import Event
from .turns import Plan, Turn, arguments_text, split_args, split_text

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error JSON."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def unknown_parameter(name: str) -> dict[str, Any]:
    """The 400 answer of a server that does not know a request field (as older OpenAI-compatible servers say it)."""
    return {"error": {"message": f"Unrecognized request argument supplied: {name}", "type": "invalid_request_error",
                      "param": name, "code": None}}


# -- chat completions ---------------------------------------------------------------------------


def chat_usage(plan: Plan) -> dict[str, Any]:
    """Chat usage: ``prompt_tokens`` includes cached tokens, reasoning is part of completion."""
    return {
        "prompt_tokens": plan.input_tokens,
        "completion_tokens": plan.output_tokens,
        "total_tokens": plan.input_tokens + plan.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": plan.cache_read_tokens,
            "cache_write_tokens": plan.cache_write_tokens,
        },
        "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
    }


def _chat_finish(plan: Plan) -> str:
    return {"length": "length", "tool": "tool_calls", "stop": "stop"}[plan.stop_kind]


def chat_completion(plan: Plan, rid: str) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": plan.text or None, "refusal": None}
    if plan.tool_calls:
        message["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.name, "arguments": arguments_text(tc)},
            }
            for tc in plan.tool_calls
        ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": plan.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _chat_finish(plan), "logprobs": None}],
        "usage": chat_usage(plan),
    }


def chat_stream(plan: Plan, rid: str, turn: Turn, body: dict[str, Any]) -> list[Event]:
    """``chat.completion.chunk`` events; a usage chunk only when ``stream_options.include_usage`` (or
    ``turn.stream_usage``)."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if turn.stream_usage is not None:
        include_usage = turn.stream_usage
    created = int(time.time())

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> Event:
        data: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": plan.model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if include_usage:
            data["usage"] = chat_usage(plan) if delta is None else None
        return (None, data)

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in split_text(plan.text, turn.chunks)]
    for index, tc in enumerate(plan.tool_calls):
        head = {
            "index": index,
            "id": tc.id,
            "type": "function",
            "function": {"name": tc.name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        for piece in split_args(arguments_text(tc)):
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    if include_usage and turn.usage_before_finish:
        events.append(chunk(None))
    events.append(chunk({}, _chat_finish(plan)))
    if include_usage and not turn.usage_before_finish:
        events.append(chunk(None))
    events.append((None, "[DONE]"))
    return events


# -- Responses API ------------------------------------------------------------------------------


def responses_usage(plan: Plan) -> dict[str, Any]:
    """Responses usage: ``input_tokens`` includes cached tokens."""
    return {
        "input_tokens": plan.input_tokens,
        "input_tokens_details": {
            "cached_tokens": plan.cache_read_tokens,
            "cache_write_tokens": plan.cache_write_tokens,
        },
        "output_tokens": plan.output_tokens,
        "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens},
        "total_tokens": plan.input_tokens + plan.output_tokens,
    }


def _message_item(plan: Plan, item_id: str, status: str, text: str | None) -> dict[str, Any]:
    content = (
        [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    )
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_item(tc: Any, item_id: str, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": tc.id,
        "name": tc.name,
        "arguments": arguments,
        "status": status,
    }


def _output_items(plan: Plan, next_id: Callable[[], int]) -> list[tuple[str, Any]]:
    """(item id, source) pairs: the message (if any text) then one per tool call."""
    items: list[tuple[str, Any]] = []
    if plan.text or not plan.tool_calls:
        items.append((f"msg_{next_id()}", None))
    items += [(f"fc_{next_id()}", tc) for tc in plan.tool_calls]
    return items


def _final_output(plan: Plan, items: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    status = "incomplete" if plan.truncated else "completed"
    return [
        _message_item(plan, iid, status, plan.text)
        if src is None
        else _call_item(src, iid, "completed", arguments_text(src))
        for iid, src in items
    ]


def _response(plan: Plan, rid: str, body: dict[str, Any], output: list[Any], final: bool) -> dict[str, Any]:
    status = ("incomplete" if plan.truncated else "completed") if final else "in_progress"
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": plan.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "max_output_tokens": body.get("max_output_tokens"),
        "incomplete_details": {"reason": "max_output_tokens"} if final and plan.truncated else None,
        "error": None,
        "usage": responses_usage(plan) if final else None,
    }


def response(plan: Plan, rid: str, body: dict[str, Any], next_id: Callable[[], int]) -> dict[str, Any]:
    """A non-streamed ``response``; truncation gives status ``incomplete``."""
    return _response(plan, rid, body, _final_output(plan, _output_items(plan, next_id)), final=True)


def responses_stream(
    plan: Plan, rid: str, turn: Turn, body: dict[str, Any], next_id: Callable[[], int]
) -> list[Event]:
    """Responses streaming events, from ``response.created`` to ``response.completed``/``incomplete``."""
    items = _output_items(plan, next_id)
    final_output = _final_output(plan, items)
    raw: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(plan, rid, body, [], final=False)},
        {"type": "response.in_progress", "response": _response(plan, rid, body, [], final=False)},
    ]
    for index, ((iid, src), done_item) in enumerate(zip(items, final_output, strict=True)):
        where = {"item_id": iid, "output_index": index}
        if src is None:
            raw.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": _message_item(plan, iid, "in_progress", None),
                }
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            raw.append({"type": "response.content_part.added", **where, "content_index": 0, "part": empty})
            for piece in split_text(plan.text, turn.chunks):
                raw.append(
                    {
                        "type": "response.output_text.delta",
                        **where,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }
                )
            raw.append(
                {
                    "type": "response.output_text.done",
                    **where,
                    "content_index": 0,
                    "text": plan.text,
                    "logprobs": [],
                }
            )
            raw.append(
                {
                    "type": "response.content_part.done",
                    **where,
                    "content_index": 0,
                    "part": done_item["content"][0],
                }
            )
        else:
            raw.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": _call_item(src, iid, "in_progress", ""),
                }
            )
            arguments = arguments_text(src)
            for piece in split_args(arguments):
                raw.append({"type": "response.function_call_arguments.delta", **where, "delta": piece})
            raw.append(
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "name": src.name,
                    "arguments": arguments,
                }
            )
        raw.append({"type": "response.output_item.done", "output_index": index, "item": done_item})
    final = _response(plan, rid, body, final_output, final=True)
    raw.append({"type": "response.incomplete" if plan.truncated else "response.completed", "response": final})
    return [(event["type"], {**event, "sequence_number": n}) for n, event in enumerate(raw)]
