"""openai SDK: chat completions (create, parse, `.stream()`, `stream=True`) and the Responses API, sync and async.

Patched at `SyncAPIClient.request` / `AsyncAPIClient.request` of the openai SDK; see `_request.py`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from ...core.calls import Guard
from ...model.call import ModelCall, TokenUsage
from ...telemetry import messages as msg
from ...telemetry import semconv as sc
from .._patch import Patches
from .._spec import AdapterSpec
from . import _params, _request, _stream_usage

_CHAT = "/chat/completions"
#: The request fields that offer tools, left out when no tool call remains (max_tool_calls).
_TOOL_FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_RESPONSES = "/responses"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """A field of a dict or an attribute of an object (None has neither: the default)."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def chat_usage(usage: Any) -> TokenUsage | None:
    """OpenAI chat usage: prompt_tokens already includes cached tokens."""
    if usage is None:
        return None
    if type(usage) is dict:  # a stream's usage-only event read from its JSON: dicts all the way down
        details, out_details = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
        return TokenUsage(  # (counts by position: keywords that skip one cost about 1.3k instructions more a call)
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            (details.get("cached_tokens") if type(details) is dict else _get(details, "cached_tokens")) or 0,
            0,
            (out_details.get("reasoning_tokens") if type(out_details) is dict
             else _get(out_details, "reasoning_tokens")) or 0,
        )
    get = getattr if type(usage) is _TYPED[2] else _get
    details = get(usage, "prompt_tokens_details", None)
    out_details = get(usage, "completion_tokens_details", None)
    return TokenUsage(get(usage, "prompt_tokens", None), get(usage, "completion_tokens", None),
                      get(details, "cached_tokens", 0) or 0, 0, get(out_details, "reasoning_tokens", 0) or 0)


def responses_usage(usage: Any) -> TokenUsage | None:
    if usage is None:
        return None
    details = _get(usage, "input_tokens_details")
    out_details = _get(usage, "output_tokens_details")
    return TokenUsage(_get(usage, "input_tokens"), _get(usage, "output_tokens"),
                      _get(details, "cached_tokens", 0) or 0, 0, _get(out_details, "reasoning_tokens", 0) or 0)


def read_response(resp: Any, call: ModelCall) -> None:
    """A Responses API `Response` into the call record."""
    call.usage = responses_usage(_get(resp, "usage"))
    call.response_model = _get(resp, "model")
    call.response_id = _get(resp, "id")
    status = _get(resp, "status")
    if status:
        call.finish_reasons = [status]
    chars = 0
    for item in _get(resp, "output", None) or ():
        if _get(item, "type") == "function_call":
            arguments = _get(item, "arguments", "")
            chars += _length(arguments)
            call.tool_calls.append((_get(item, "name", ""), arguments, _get(item, "call_id")))
        elif _get(item, "type") == "message":
            for part in _get(item, "content", None) or ():
                text = _get(part, "text", "") or ""
                chars += _length(text)
                if call.output_text is not None:
                    call.output_text.append(text)
    if chars > call.output_chars:  # a stream's final response repeats what its deltas said
        call.output_chars = chars


def read_chat(result: Any, call: ModelCall, usage: Callable[[Any], TokenUsage | None] = chat_usage) -> None:
    """A chat completion (OpenAI-shaped, as LiteLLM returns too) into the call record."""
    # The openai SDK's own completion holds typed objects all the way down (never a dict): read by attribute.
    get = getattr if type(result) is _TYPED[1] else _get
    call.usage = usage(get(result, "usage", None))
    call.response_model = get(result, "model", None)
    call.response_id = get(result, "id", None)
    for choice in get(result, "choices", None) or ():
        reason = get(choice, "finish_reason", None)
        if reason:
            call.finish_reasons.append(reason)
        message = get(choice, "message", None)
        content = get(message, "content", None)
        call.output_chars += _length(content)  # the basis of the estimate when no usage is reported
        if call.output_text is not None and content:
            call.output_text.append(content)
        for tc in get(message, "tool_calls", None) or ():
            fn = get(tc, "function", None)
            arguments = get(fn, "arguments", "")
            call.output_chars += _length(arguments)
            call.tool_calls.append((get(fn, "name", "") or "", arguments, get(tc, "id", None)))


def _length(text: Any) -> int:
    """Characters of a text, or of the JSON of anything else (tool arguments as objects)."""
    if not text:
        return 0
    if isinstance(text, str):
        return len(text)
    try:
        return len(json.dumps(text, default=str))
    except Exception:  # noqa: BLE001
        return 0


def chat_content(messages: Any) -> tuple[None, list[msg.Message]]:
    """Chat completion messages in the conventions' schema (a system message stays in the history)."""
    out: list[msg.Message] = []
    for m in messages or ():
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "user"))
        if role == "tool":
            out.append({"role": "tool", "parts": [msg.tool_response(m.get("tool_call_id"), m.get("content"))]})
            continue
        parts = msg.content_parts(m.get("content"))
        for tc in m.get("tool_calls") or ():
            fn = _get(tc, "function") or {}
            parts.append(msg.tool_call(_get(tc, "id"), _get(fn, "name"), _get(fn, "arguments")))
        out.append({"role": "system" if role == "developer" else role, "parts": parts})
    return None, out


def responses_content(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, list[msg.Message]]:
    """A Responses request: `instructions` are system instructions; `input` items become messages."""
    instructions = body.get("instructions")
    system = msg.content_parts(instructions) if instructions else None
    items = body.get("input")
    if isinstance(items, str):
        return system, [{"role": "user", "parts": [msg.text(items)]}]
    out: list[msg.Message] = []
    for item in items or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            out.append({"role": "assistant", "parts": [
                msg.tool_call(item.get("call_id"), item.get("name"), item.get("arguments"))]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "parts": [msg.tool_response(item.get("call_id"), item.get("output"))]})
        elif "role" in item:
            role = str(item["role"])
            out.append({"role": "system" if role == "developer" else role,
                        "parts": msg.content_parts(item.get("content"))})
        else:
            out.append({"role": "user", "parts": [{"type": str(kind or "unknown")}]})
    return system, out


class ChatStream:
    """Reads chat completion chunks. When we asked for usage (`hide_usage`), the caller sees the stream as the
    server sends it without `include_usage`: the usage-only chunk is hidden and the other chunks carry no
    `usage` field (the server adds `"usage": null` to each of them only because we asked)."""

    __slots__ = ("call", "hide_usage", "tools", "usage", "sdk_chunk", "decoder")

    def __init__(self, call: ModelCall, hide_usage: bool) -> None:
        self.call = call
        self.hide_usage = hide_usage
        self.tools: dict[int, list[Any]] = {}
        self.usage: Any = None
        #: The openai SDK's chunk class, read once per stream rather than once per chunk (None: not known).
        self.sdk_chunk: Any = _TYPED[0]
        self.decoder: Any = None  # the SDK stream's decoder, until the answer's finish arms it (`watch`)

    def feed(self, chunk: Any) -> bool:
        """The openai SDK's own chunk: typed objects all the way down, never a dict, every declared field set (the
        SDK's `construct` fills defaults), so fields are read as attributes; anything else by `_feed_any`."""
        if type(chunk) is not self.sdk_chunk:
            return self._feed_any(chunk)
        call = self.call
        if call.response_id is None:
            call.response_id = chunk.id
            call.response_model = chunk.model
        usage = chunk.usage
        choices = chunk.choices
        if self.hide_usage:
            if usage is not None:
                self.usage = usage
                if not choices:
                    return False
                chunk.__dict__["usage"] = None
            fields = chunk.__pydantic_fields_set__
            if "usage" in fields:  # the `"usage": null` the server added only for us
                fields.discard("usage")
        elif usage is not None:
            self.usage = usage
        for choice in choices or ():
            delta = choice.delta
            content = delta.content
            if content:
                call.output_chars += len(content)
                if call.output_text is not None:
                    call.output_text.append(content)
            tool_calls = delta.tool_calls
            if tool_calls:
                self._tool_deltas(tool_calls, getattr)
            reason = choice.finish_reason
            if reason:
                call.finish_reasons.append(reason)
                if self.decoder is not None:
                    self._arm()
        return True

    def _feed_any(self, chunk: Any) -> bool:
        """`feed` for a dict or another library's chunk (LiteLLM)."""
        call = self.call
        if call.response_id is None:
            call.response_id = _get(chunk, "id")
            call.response_model = _get(chunk, "model")
        usage = _get(chunk, "usage")
        choices = _get(chunk, "choices")
        if usage is not None:
            self.usage = usage
            if self.hide_usage and not choices:
                return False
        if self.hide_usage:
            _unset_usage(chunk)
        for choice in choices or ():
            delta = _get(choice, "delta")
            content = _get(delta, "content")
            if content:
                call.output_chars += len(content)
                if call.output_text is not None:
                    call.output_text.append(content)
            tool_calls = _get(delta, "tool_calls")
            if tool_calls:
                self._tool_deltas(tool_calls, _get)
            reason = _get(choice, "finish_reason")
            if reason:
                call.finish_reasons.append(reason)
        return True

    def _tool_deltas(self, deltas: Any, get: Callable[[Any, str, Any], Any]) -> None:
        """Assemble tool calls from their deltas (index, id and name once, arguments in pieces)."""
        call = self.call
        for tc in deltas:
            slot = self.tools.setdefault(get(tc, "index", 0) or 0, [None, "", None])
            fn = get(tc, "function", None)
            tc_id = get(tc, "id", None)
            if tc_id:
                slot[2] = tc_id
            name = get(fn, "name", None)
            if name:
                slot[0] = name
            args = get(fn, "arguments", None)
            if args:
                slot[1] += args
                call.output_chars += len(args)

    def watch(self, stream: Any) -> None:
        """The SDK stream this reads: its `SSEDecoder` reads and skips the usage-only event once armed (`_arm`)."""
        if self.hide_usage and type(decoder := getattr(stream, "_decoder", None)) is _TYPED[3]:
            self.decoder = decoder

    def _arm(self) -> None:  # (see `_stream_usage.skip_usage_event`; no reference to the decoder is kept)
        decoder, self.decoder = self.decoder, None
        _stream_usage.skip_usage_event(decoder, self._take_usage)

    def _take_usage(self, data: dict[str, Any]) -> None:
        self.usage = data["usage"]
        if self.call.response_id is None:
            self.call.response_id, self.call.response_model = data.get("id"), data.get("model")

    def apply(self) -> None:
        self.call.usage = chat_usage(self.usage)
        tools = self.tools
        if tools:  # (map, not a generator over self: that would make `self` a cell on every call)
            self.call.tool_calls = [(n or "", a, i) for n, a, i in map(tools.__getitem__, sorted(tools))]


def _unset_usage(chunk: Any) -> None:
    """Take the `usage` field that only our `include_usage` put on a chunk off it again (SDK models and dicts)."""
    if isinstance(chunk, dict):
        chunk.pop("usage", None)
        return
    fields = getattr(chunk, "__pydantic_fields_set__", None)
    if isinstance(fields, set) and "usage" in fields:
        if getattr(chunk, "usage", None) is not None:
            chunk.__dict__["usage"] = None
        fields.discard("usage")


#: The SDK's chunk, completion, usage and SSE decoder classes, set by `_look_up_types` (no SDK import here).
_TYPED: list[type | None] = [None, None, None, None]


class ResponsesStream:
    """Reads Responses API stream events; the final event carries the whole response."""

    __slots__ = ("call", "final")

    def __init__(self, call: ModelCall) -> None:
        self.call = call
        self.final: Any = None

    def feed(self, event: Any) -> bool:
        kind = _get(event, "type", "")
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = _get(event, "response")
        elif kind.endswith(".delta"):
            delta = _get(event, "delta")
            if isinstance(delta, str):
                self.call.output_chars += len(delta)
        return True

    def apply(self) -> None:
        if self.final is not None:
            text = self.call.output_text
            self.call.output_text = None if text is None else []
            read_response(self.final, self.call)


class OpenAIAdapter:
    provider = sc.PROVIDER_OPENAI

    def describe(self, options: Any, stream: bool) -> ModelCall | None:
        url = options.url
        method = options.method
        if method != "post" and method.lower() != "post" or url not in (_CHAT, _RESPONSES):
            return None
        body = options.json_data if isinstance(options.json_data, dict) else {}
        if url == _CHAT:
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
        else:
            limit = body.get("max_output_tokens")
        n = body.get("n")
        call = ModelCall(self.provider, sc.OP_CHAT, str(body.get("model", "")), limit, stream or bool(body.get("stream")),
                         n if url == _CHAT else 1)  # (choices, by position: no keyword to match)
        text = body.get("text")
        fmt = body.get("response_format") if url == _CHAT else text.get("format") if isinstance(text, dict) else None
        call.params = _params.read(body, _params.OPENAI_KEYS, choices=n, output_format=fmt)
        if url == _CHAT:
            call.prompt = (body, "messages")
        elif not body.get("previous_response_id") and not body.get("conversation"):  # no server-side history
            call.prompt = (body, "input")
        else:
            call.results = (body, "input")
        return call

    def content(self, options: Any) -> tuple[Any, list[msg.Message]]:
        """The request's content in the conventions' message schema (only read when content is captured)."""
        body = options.json_data
        if options.url == _CHAT:
            return chat_content(body.get("messages"))
        return responses_content(body)

    def prepare(self, options: Any, call: ModelCall, guard: Guard | None) -> None:
        body = options.json_data
        if not isinstance(body, dict):
            return
        changed: dict[str, Any] = {}
        chat = options.url == _CHAT
        if guard is not None and guard.max_output_tokens is not None:
            changed["max_completion_tokens" if chat else "max_output_tokens"] = guard.max_output_tokens
        if chat:
            stream_options = _stream_usage.ask(body, call, guard)
            if stream_options is not None:
                changed["stream_options"] = stream_options
        if changed:
            options.json_data = {**body, **changed}
        if guard is not None and guard.no_tools and "tools" in body:  # as the wrap-up call: no tools to ask for
            options.json_data = {k: v for k, v in options.json_data.items() if k not in _TOOL_FIELDS}
        if callable(getattr(options, "post_parser", None)):  # `parse()`: its parser may reject the answer
            options.post_parser = self._read_if_rejected(options.post_parser, call)

    def without_usage(self, options: Any, guard: Guard) -> bool:
        """Put the request back as the caller made it (without the `stream_options` we added), for a server that
        rejected them. False when the caller set them itself."""
        body = options.json_data
        plain = _stream_usage.without_usage(body) if isinstance(body, dict) else None
        if plain is None:
            return False
        options.json_data = plain
        return True

    def _read_if_rejected(self, parser: Any, call: ModelCall) -> Any:
        """The SDK's `parse()` parser, reading the answer it rejects (`LengthFinishReasonError` on a cut answer)
        into the call first, so its usage counts and a cut at the budget's output limit is seen."""

        def parse(raw: Any) -> Any:
            try:
                return parser(raw)
            except Exception:
                with contextlib.suppress(Exception):  # our reading never replaces their error
                    self.read(raw, call)
                raise

        return parse

    def read(self, result: Any, call: ModelCall) -> None:
        if type(result) is not _TYPED[1] and _get(result, "object") == "response":
            read_response(result, call)
        else:
            read_chat(result, call)

    def accumulator(self, call: ModelCall, options: Any) -> Any:
        if options.url == _CHAT:
            return ChatStream(call, call.injected_usage)
        return ResponsesStream(call)

    def summarizer(self, client: Any, call: ModelCall) -> Any:
        model = call.model

        def summarize(prompt: str, max_tokens: int) -> Any:
            made = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], max_completion_tokens=max_tokens
            )
            if hasattr(made, "__await__"):
                return _await_text(made)
            return made.choices[0].message.content

        return summarize


async def _await_text(made: Any) -> str:
    result = await made
    return str(result.choices[0].message.content or "")


def _look_up_types(patches: Patches) -> None:
    from openai._streaming import SSEDecoder
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    _TYPED[:] = [ChatCompletionChunk, ChatCompletion, CompletionUsage, SSEDecoder]


SPEC = AdapterSpec(
    requires=("openai >= 1.60, < 4",),
    patches=_request.client_points("openai._base_client", OpenAIAdapter()),
    setup=_look_up_types,
)
