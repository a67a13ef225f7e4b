"""Gemini API wire shapes (`models/{model}:generateContent`, `:streamGenerateContent?alt=sse`) for google-genai.

Point the real SDK at the server with
``genai.Client(api_key="x", http_options=types.HttpOptions(base_url=llm.base_url))``. Usage follows Gemini:
``promptTokenCount`` includes ``cachedContentTokenCount``; ``candidatesTokenCount`` EXCLUDES
``thoughtsTokenCount`` (the turn's ``reasoning_tokens``). The output limit is
``generationConfig.maxOutputTokens``; a truncated answer ends with ``MAX_TOKENS``.
"""

from __future__ import annotations

import re
from typing import Any

from .sse import Event
from .turns import Plan, Turn, make_plan, split_text

API = "gemini.generate_content"
_PATH = re.compile(r"^/(?:v1beta|v1|v1alpha)/(?:.*/)?models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$")
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


def route(path: str) -> str | None:
    """The api name for a Gemini path (query string removed), or None."""
    return API if _PATH.match(path) else None


def model_and_stream(path: str) -> tuple[str, bool]:
    """The model named in the path and whether the method streams."""
    match = _PATH.match(path.split("?", 1)[0].rstrip("/"))
    if match is None:
        return "scripted-model", False
    return match["model"], match["method"] == "streamGenerateContent"


def error_body(status: int, message: str) -> dict[str, Any]:
    """Google's error JSON."""
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}


def plan_for(turn: Turn, path: str, body: dict[str, Any], raw_len: int, next_id: Any) -> Plan:
    """The answer's plan; the output limit comes from ``generationConfig.maxOutputTokens``."""
    model, _ = model_and_stream(path)
    config = body.get("generationConfig") or {}
    neutral: dict[str, Any] = {"model": model}
    if isinstance(config.get("maxOutputTokens"), int):
        neutral["max_tokens"] = config["maxOutputTokens"]
    return make_plan(turn, "openai.chat", neutral, raw_len, next_id)


def usage(plan: Plan) -> dict[str, Any]:
    """``usageMetadata``: candidates exclude thoughts; the prompt count includes cached content."""
    meta: dict[str, Any] = {
        "promptTokenCount": plan.input_tokens,
        "candidatesTokenCount": plan.output_tokens - plan.reasoning_tokens,
        "totalTokenCount": plan.input_tokens + plan.output_tokens,
    }
    if plan.cache_read_tokens:
        meta["cachedContentTokenCount"] = plan.cache_read_tokens
    if plan.reasoning_tokens:
        meta["thoughtsTokenCount"] = plan.reasoning_tokens
    return meta


def _finish(plan: Plan) -> str:
    return "MAX_TOKENS" if plan.truncated else "STOP"


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return candidate


def _calls(plan: Plan) -> list[dict[str, Any]]:
    return [{"functionCall": {"id": tc.id, "name": tc.name, "args": tc.arguments}} for tc in plan.tool_calls]


def response(plan: Plan, rid: str) -> dict[str, Any]:
    """A non-streamed ``GenerateContentResponse``."""
    parts = ([{"text": plan.text}] if plan.text or not plan.tool_calls else []) + _calls(plan)
    return {"candidates": [_candidate(parts, _finish(plan))], "usageMetadata": usage(plan),
            "modelVersion": plan.model, "responseId": rid}


def stream(plan: Plan, rid: str, turn: Turn) -> list[Event]:
    """Streamed chunks: text pieces, then function calls, then the finish reason with the final usage."""
    chunks: list[dict[str, Any]] = []
    for piece in split_text(plan.text, turn.chunks):
        chunks.append({"candidates": [_candidate([{"text": piece}], None)]})
    if plan.tool_calls:
        chunks.append({"candidates": [_candidate(_calls(plan), None)]})
    if not chunks:
        chunks.append({"candidates": [_candidate([{"text": ""}], None)]})
    chunks[-1]["candidates"][0]["finishReason"] = _finish(plan)
    for chunk in chunks:
        chunk.update({"modelVersion": plan.model, "responseId": rid})
    chunks[-1]["usageMetadata"] = usage(plan)
    return [(None, chunk) for chunk in chunks]
