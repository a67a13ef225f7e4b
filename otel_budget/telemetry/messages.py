"""Captured content in the GenAI conventions' message schema, and its OpenInference twins.

Adapters translate a provider's request into neutral messages (`{"role", "parts": [...]}`, parts of type
`text`, `tool_call`, `tool_call_response`); this module turns them, and a call's answer, into attributes.
Only used when content capture is on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from . import semconv as sc

Message = dict[str, Any]

#: Provider finish reasons -> the conventions' values (others are kept as they are).
_FINISH = {"tool_calls": "tool_call", "tool_use": "tool_call", "function_call": "tool_call", "end_turn": "stop",
           "stop_sequence": "stop", "completed": "stop", "max_tokens": "length", "max_output_tokens": "length",
           "incomplete": "length", "STOP": "stop", "MAX_TOKENS": "length"}


def text(content: Any) -> dict[str, Any]:
    """A text part."""
    return {"type": "text", "content": content if isinstance(content, str) else _json(content)}


def tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A tool call the model asked for; JSON-text arguments are decoded so they read as objects."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass
    return {"type": "tool_call", "id": str(call_id) if call_id else None, "name": str(name or ""),
            "arguments": arguments}


def tool_response(call_id: Any, response: Any) -> dict[str, Any]:
    """A tool result sent back to the model."""
    return {"type": "tool_call_response", "id": str(call_id) if call_id else None, "response": response}


def content_parts(content: Any) -> list[dict[str, Any]]:
    """Parts of a message body that is a string or a list of text blocks (chat, Responses, Anthropic shapes)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [text(content)]
    if not isinstance(content, list):
        return [text(content)]
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(text(block))
        elif isinstance(block, dict):
            kind = block.get("type")
            if "text" in block and kind in ("text", "input_text", "output_text", None):
                parts.append(text(block["text"]))
            elif kind == "refusal":
                parts.append(text(block.get("refusal", "")))
            else:  # images, files, audio: named by type, their data left out
                parts.append({"type": str(kind or "unknown")})
    return parts


def finish_reason(reasons: list[str]) -> str:
    """The conventions' finish reason of an answer."""
    if not reasons:
        return "stop"
    reason = str(reasons[0])
    return _FINISH.get(reason, _FINISH.get(reason.lower(), reason.lower()))


def output_messages(texts: Iterable[str] | None, tool_calls: list[tuple[str, Any, str | None]],
                    reasons: list[str]) -> list[Message]:
    """The answer as one assistant message: its text, then the tool calls it asked for."""
    parts: list[dict[str, Any]] = []
    joined = "".join(texts or ())
    if joined:
        parts.append(text(joined))
    for name, arguments, call_id in tool_calls:
        parts.append(tool_call(call_id, name, arguments))
    reason = finish_reason(reasons)
    if tool_calls and reason == "stop":
        reason = "tool_call"
    return [{"role": "assistant", "parts": parts, "finish_reason": reason}]


def input_attributes(system: list[dict[str, Any]] | None, messages: list[Message], *,
                     openinference: bool = False) -> dict[str, Any]:
    """Attributes of a request's content: the conventions' JSON, and OpenInference's flattened messages when
    the twins are asked for."""
    text = _json(messages)
    attrs: dict[str, Any] = {sc.GEN_AI_INPUT_MESSAGES: text}
    if system:
        attrs[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = _json(system)
    if openinference:
        attrs[sc.OI_INPUT_VALUE] = text
        flat = list(messages)
        if system:
            flat.insert(0, {"role": "system", "parts": system})
        _flatten(attrs, sc.OI_INPUT_MESSAGES, flat)
    return attrs


def output_attributes(messages: list[Message], *, openinference: bool = False) -> dict[str, Any]:
    """Attributes of an answer's content (and its OpenInference twins when asked for)."""
    attrs: dict[str, Any] = {sc.GEN_AI_OUTPUT_MESSAGES: _json(messages)}
    if openinference:
        attrs[sc.OI_OUTPUT_VALUE] = "".join(_texts(m) for m in messages)
        _flatten(attrs, sc.OI_OUTPUT_MESSAGES, messages)
    return attrs


def content_capture_from_env() -> bool:
    """Whether OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks for content capture."""
    value = os.environ.get(sc.ENV_CAPTURE_CONTENT, "").strip().upper()
    return value in {"TRUE", "1", "SPAN_ONLY", "SPAN_AND_EVENT", "EVENT_ONLY"}


def capture_mode() -> tuple[bool, bool]:
    """(on the span, as an event) from OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT; span only by default."""
    value = os.environ.get(sc.ENV_CAPTURE_CONTENT, "").strip().upper()
    if value == "EVENT_ONLY":
        return False, True
    if value == "SPAN_AND_EVENT":
        return True, True
    return True, False


def _texts(message: Message) -> str:
    return "".join(p.get("content", "") for p in message.get("parts", ()) if p.get("type") == "text")


def _flatten(attrs: dict[str, Any], prefix: str, messages: list[Message]) -> None:
    for i, message in enumerate(messages):
        base = f"{prefix}.{i}."
        attrs[base + sc.OI_MESSAGE_ROLE] = str(message.get("role", ""))
        content = _texts(message)
        if content:
            attrs[base + sc.OI_MESSAGE_CONTENT] = content
        j = 0
        for part in message.get("parts", ()):
            kind = part.get("type")
            if kind == "tool_call":
                call = f"{base}{sc.OI_MESSAGE_TOOL_CALLS}.{j}."
                if part.get("id"):
                    attrs[call + sc.OI_TOOL_CALL_ID] = part["id"]
                attrs[call + sc.OI_TOOL_CALL_FUNCTION_NAME] = part.get("name", "")
                attrs[call + sc.OI_TOOL_CALL_FUNCTION_ARGUMENTS] = _json(part.get("arguments"))
                j += 1
            elif kind == "tool_call_response":
                if part.get("id"):
                    attrs[base + sc.OI_MESSAGE_TOOL_CALL_ID] = part["id"]
                if not content:
                    attrs[base + sc.OI_MESSAGE_CONTENT] = _json(part.get("response"))


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except Exception:  # noqa: BLE001
        return repr(value)
