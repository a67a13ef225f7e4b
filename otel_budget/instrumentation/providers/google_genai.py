"""google-genai: `models.generate_content`, `generate_content_stream` and their `client.aio` twins.

Patched at the SDK's request choke point, `BaseApiClient.request` / `request_streamed` / `async_request` /
`async_request_streamed`, for `...models/{model}:generateContent` and `:streamGenerateContent` paths only.
Each HTTP request is one metered call, so automatic function calling (the SDK's own tool loop) is checked
and counted call by call; each Python function it runs (`_extra_utils.invoke_function_from_dict_args` and its
`_async` twin), and each tool of an MCP session it calls (`McpToGenAiToolAdapter.call_tool`), is admitted before it
runs, like `@tool`, and spanned `execute_tool {name}`. A refused execution does not run: the SDK turns the refusal into the function's error, and the next
model call is refused. Usage is normalized: input = `promptTokenCount` (it already includes
`cachedContentTokenCount`) + `toolUsePromptTokenCount`; output = `candidatesTokenCount` + `thoughtsTokenCount`.
`max_seconds` bounds the SDK's retries (`HttpRetryOptions`, run by tenacity): a retry is made only if it can start
before the deadline, with the time left then as its timeout.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from ...core import calls
from ...core import tools as tool_calls
from ...core.calls import Guard
from ...model.call import ModelCall, TokenUsage
from ...model.outcome import BudgetExceeded
from ...telemetry import messages as msg
from ...telemetry import semconv as sc
from .._spec import AdapterSpec, PatchPoint, points
from . import _params
from ._request import admit_async
from ._retries import TENACITY
from ._stream import AsyncStream, SyncStream

log = logging.getLogger(__name__)

_METHODS = (":generateContent", ":streamGenerateContent")


def usage_of(meta: Any) -> TokenUsage | None:
    """`usageMetadata` (wire JSON) in the conventions' terms."""
    if not isinstance(meta, dict):
        return None
    thoughts = meta.get("thoughtsTokenCount") or 0
    return TokenUsage(
        _add(meta.get("promptTokenCount"), meta.get("toolUsePromptTokenCount")),
        _add(meta.get("candidatesTokenCount") or 0, thoughts),
        cache_read=meta.get("cachedContentTokenCount") or 0,
        reasoning=thoughts,
    )


def _add(count: Any, extra: Any) -> Any:
    """count + extra as the wire gave them (TokenUsage judges the result); None when count is missing."""
    if count is None:
        return None
    try:
        return count + (extra or 0)
    except TypeError:
        return math.nan


def _model(path: str) -> str | None:
    """`models/gemini-2.5-flash:generateContent?alt=sse` -> `gemini-2.5-flash`; None for other paths."""
    head = path.split("?", 1)[0]
    if not head.endswith(_METHODS):
        return None
    name = head.rsplit(":", 1)[0]
    return name.rsplit("models/", 1)[-1] if "models/" in name else name.rsplit("/", 1)[-1]


class ChunkReader:
    """Reads response bodies (one, or one per stream chunk) into the call record."""

    __slots__ = ("call", "meta", "calls")

    def __init__(self, call: ModelCall) -> None:
        self.call = call
        self.meta: Any = None
        self.calls: list[tuple[str, Any, str | None]] = []

    def feed(self, response: Any) -> bool:
        body = getattr(response, "body", None)
        data = json.loads(body) if isinstance(body, str) and body else body
        if not isinstance(data, dict):
            return True
        call = self.call
        if data.get("usageMetadata") is not None:
            self.meta = data["usageMetadata"]
        call.response_model = data.get("modelVersion") or call.response_model
        call.response_id = data.get("responseId") or call.response_id
        for candidate in data.get("candidates") or ():
            reason = candidate.get("finishReason")
            if reason:
                call.finish_reasons.append(str(reason).lower())
            for part in (candidate.get("content") or {}).get("parts") or ():
                text = part.get("text")
                if isinstance(text, str):
                    call.output_chars += len(text)
                    if call.output_text is not None and not part.get("thought"):
                        call.output_text.append(text)
                fc = part.get("functionCall")
                if isinstance(fc, dict):
                    self.calls.append((str(fc.get("name", "")), fc.get("args") or {}, fc.get("id")))
        return True

    def apply(self) -> None:
        self.call.usage = usage_of(self.meta)
        self.call.tool_calls = list(self.calls)


def contents_messages(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, list[msg.Message]]:
    """A generateContent request in the conventions' schema: `systemInstruction` apart, `contents` as messages."""
    system_parts = _parts((body.get("systemInstruction") or {}).get("parts"))
    out: list[msg.Message] = []
    for content in body.get("contents") or ():
        if not isinstance(content, dict):
            continue
        parts = _parts(content.get("parts"))
        role = {"model": "assistant"}.get(str(content.get("role", "user")), str(content.get("role", "user")))
        if parts and all(p["type"] == "tool_call_response" for p in parts):
            role = "tool"
        out.append({"role": role, "parts": parts})
    return system_parts or None, out


def _parts(parts: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts or ():
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            out.append({"type": "reasoning", "content": part["text"]} if part.get("thought") else msg.text(part["text"]))
        elif isinstance(part.get("functionCall"), dict):
            fc = part["functionCall"]
            out.append(msg.tool_call(fc.get("id"), fc.get("name"), fc.get("args") or {}))
        elif isinstance(part.get("functionResponse"), dict):
            fr = part["functionResponse"]
            out.append(msg.tool_response(fr.get("id") or fr.get("name"), fr.get("response")))
        else:
            out.append({"type": next(iter(part), "unknown")})
    return out


def _server(client: Any) -> tuple[str, int | None] | None:
    """(server.address, server.port) of the API client's base URL."""
    return _params.server(getattr(getattr(client, "_http_options", None), "base_url", None))


def _split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, Any, Any]:
    names = ("http_method", "path", "request_dict", "http_options")
    values = list(args) + [kwargs.get(n) for n in names[len(args):]]
    return values[0], values[1], values[2], values[3]


def _with_timeout(options: Any, seconds: float) -> Any:
    """The request's http_options with its timeout (milliseconds) lowered to `seconds`."""
    ms = max(1, int(seconds * 1000))
    if options is None:
        return {"timeout": ms}
    if isinstance(options, dict):
        current = options.get("timeout")
        return options if isinstance(current, int) and current <= ms else {**options, "timeout": ms}
    current = getattr(options, "timeout", None)
    if isinstance(current, int) and current <= ms:
        return options
    return options.model_copy(update={"timeout": ms})


def _start(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], stream: bool, is_async: bool):  # type: ignore[no-untyped-def]
    """Admit the call; returns (guard, args, kwargs) to send, or None to send the request unmetered."""
    try:
        method, path, body, options = _split(args, kwargs)
        model = _model(path) if str(method).lower() == "post" and isinstance(path, str) else None
        if model is None or not isinstance(body, dict):
            return None
        config = body.get("generationConfig") or {}
        limit = config.get("maxOutputTokens")
        provider = sc.PROVIDER_VERTEX_AI if getattr(instance, "vertexai", False) else sc.PROVIDER_GEMINI
        call = ModelCall(provider, sc.OP_GENERATE_CONTENT, model, limit if isinstance(limit, int) else None, stream,
                         choices=config.get("candidateCount") or 1)
        call.params = _params.read(config, _params.GEMINI_KEYS, stop="stopSequences",
                                   choices=config.get("candidateCount"), output_format=config.get("responseMimeType"))
        call.server = _server(instance)
        call.results = (body, "contents")
    except Exception:  # noqa: BLE001 - our bug: the original call goes through unchanged
        log.warning("otel-budget: could not read a google-genai request; sending it unmetered", exc_info=True)
        return None
    guard = calls.begin(
        call,
        lambda: len(json.dumps(body, default=str)),
        summarizer=lambda: _summarizer(instance, model, is_async),
        capture_input=lambda: contents_messages(body),
    )
    if guard is None:
        return None
    try:
        if guard.max_output_tokens is not None:
            body = {**body, "generationConfig": {**config, "maxOutputTokens": guard.max_output_tokens}}
        if guard.timeout is not None:
            options = _with_timeout(options, guard.timeout)
        return guard, (method, path, body, options), {}
    except Exception:  # noqa: BLE001
        log.warning("otel-budget: could not adjust a google-genai request", exc_info=True)
        return guard, args, kwargs


def _summarizer(api_client: Any, model: str, is_async: bool) -> Any:
    def summarize(prompt: str, max_tokens: int) -> Any:
        request = {"contents": [{"role": "user", "parts": [{"text": prompt}]}],
                   "generationConfig": {"maxOutputTokens": max_tokens}}
        if is_async:
            return _await_text(api_client.async_request("post", f"models/{model}:generateContent", request))
        return _text(api_client.request("post", f"models/{model}:generateContent", request))

    return summarize


def _text(response: Any) -> str:
    data = json.loads(response.body or "{}")
    parts = ((data.get("candidates") or [{}])[0].get("content") or {}).get("parts") or []
    return "".join(p.get("text", "") for p in parts if not p.get("thought"))


async def _await_text(made: Any) -> str:
    return _text(await made)


def _read(guard: Guard, response: Any) -> Any:
    reader = ChunkReader(guard.call)
    try:
        reader.feed(response)
        reader.apply()
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not read a google-genai response", exc_info=True)
    guard.finish()
    return response


def _request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    started = _start(instance, args, kwargs, False, False)
    if started is None:
        return wrapped(*args, **kwargs)
    guard, a, k = started
    response = guard.send(wrapped, *a, **k)
    return _read(guard, response)


async def _async_request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    started = await admit_async(lambda: _start(instance, args, kwargs, False, True))
    if started is None:
        return await wrapped(*args, **kwargs)
    guard, a, k = started
    response = await guard.asend(wrapped, *a, **k)
    return _read(guard, response)


def _request_streamed(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    started = _start(instance, args, kwargs, True, False)
    if started is None:
        return wrapped(*args, **kwargs)
    guard, a, k = started
    chunks = guard.send(wrapped, *a, **k)  # a generator: the request goes out on the first next()
    return SyncStream(chunks, guard, ChunkReader(guard.call))


async def _async_request_streamed(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    started = await admit_async(lambda: _start(instance, args, kwargs, True, True))
    if started is None:
        return await wrapped(*args, **kwargs)
    guard, a, k = started
    chunks = await guard.asend(wrapped, *a, **k)
    return AsyncStream(chunks, guard, ChunkReader(guard.call))


# --- automatic function calling: the functions the SDK runs for the model -------------------------------------


def _begin_tool(name: str, arguments: Any) -> tuple[Any, ...] | None:
    """Admit one execution (raises BudgetExceeded when refused); None when our own code failed."""
    try:
        return tool_calls.begin_tool(name, arguments if isinstance(arguments, dict) else {})
    except BudgetExceeded:
        raise
    except Exception:  # noqa: BLE001 - our bug: the function runs unmetered
        log.warning("otel-budget: could not check a google-genai function call", exc_info=True)
        return None


def _function(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    values = dict(zip(("args", "function_to_invoke"), args, strict=False)) | kwargs
    func = values.get("function_to_invoke")
    return str(getattr(func, "__name__", None) or "function"), values.get("args")


def _invoke(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    state = _begin_tool(*_function(args, kwargs))
    if state is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        tool_calls.end_tool(state, None, exc)
        raise
    tool_calls.end_tool(state, result)
    return result


async def _invoke_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    state = _begin_tool(*_function(args, kwargs))
    if state is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        tool_calls.end_tool(state, None, exc)
        raise
    tool_calls.end_tool(state, result)
    return result


async def _call_mcp_tool(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An MCP session's tool the SDK calls for the model (`McpToGenAiToolAdapter.call_tool(function_call)`)."""
    function_call = args[0] if args else kwargs.get("function_call")
    state = _begin_tool(str(getattr(function_call, "name", None) or "tool"), getattr(function_call, "args", None))
    if state is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        tool_calls.end_tool(state, None, exc)
        raise
    tool_calls.end_tool(state, result)
    return result


SPEC = AdapterSpec(
    requires=("google-genai >= 1.0, < 4",),
    patches=(
        *points("google.genai._api_client", {
            "BaseApiClient.request": _request, "BaseApiClient.request_streamed": _request_streamed,
            "BaseApiClient.async_request": _async_request,
            "BaseApiClient.async_request_streamed": _async_request_streamed}),
        *points("google.genai._extra_utils", {"invoke_function_from_dict_args": _invoke,
                                              "invoke_function_from_dict_args_async": _invoke_async}),
        *TENACITY,  # HttpRetryOptions: the SDK's retry loop, bounded by the run's deadline
        PatchPoint("google.genai._adapters", "McpToGenAiToolAdapter.call_tool", _call_mcp_tool,
                   optional=True),  # an SDK without MCP support lacks it
    ),
)
