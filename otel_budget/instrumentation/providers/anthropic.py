"""anthropic SDK: messages (create, `stream=True`, the `.stream()` helper), sync and async, beta included.

Patched at the anthropic SDK's `SyncAPIClient.request` / `AsyncAPIClient.request`. The anthropic SDK emits its
own CLIENT span per call through the global tracer provider; for the calls we span, we clear the request's
`span_name`, which is how the SDK knows a request has no span, so a call is never counted twice in traces,
whatever the client's `open_telemetry` setting.
"""

from __future__ import annotations

from typing import Any

from ...core.calls import Guard
from ...model.call import ModelCall, TokenUsage
from ...telemetry import messages as msg
from ...telemetry import semconv as sc
from .._spec import AdapterSpec
from . import _params, _request
from .openai import _get, _length

_MESSAGES = "/v1/messages"


def usage_of(usage: Any) -> TokenUsage | None:
    """Anthropic's input_tokens EXCLUDES cache reads and writes; the conventions' input includes them."""
    if usage is None:
        return None
    cache_read = _get(usage, "cache_read_input_tokens", 0) or 0
    cache_write = _get(usage, "cache_creation_input_tokens", 0) or 0
    details = _get(usage, "output_tokens_details")
    fresh = _get(usage, "input_tokens")
    try:
        total_in = None if fresh is None else fresh + cache_read + cache_write
    except TypeError:  # not numbers: not reported
        total_in = None
    return TokenUsage(
        total_in,
        _get(usage, "output_tokens"),
        cache_read=cache_read,
        cache_write=cache_write,
        reasoning=_get(details, "thinking_tokens", 0) or 0,
    )


class MessageStream:
    """Reads raw message stream events: message_start has input usage, message_delta the output count."""

    __slots__ = ("call", "start_usage", "output_tokens", "blocks")

    def __init__(self, call: ModelCall) -> None:
        self.call = call
        self.start_usage: Any = None
        self.output_tokens: int | None = None
        self.blocks: dict[int, list[Any]] = {}

    def feed(self, event: Any) -> bool:
        kind = _get(event, "type")
        call = self.call
        if kind == "message_start":
            message = _get(event, "message")
            self.start_usage = _get(message, "usage")
            call.response_model = _get(message, "model")
            call.response_id = _get(message, "id")
        elif kind == "content_block_start":
            block = _get(event, "content_block")
            if _get(block, "type") == "tool_use":
                self.blocks[_get(event, "index", 0)] = [_get(block, "name", ""), "", _get(block, "id")]
        elif kind == "content_block_delta":
            delta = _get(event, "delta")
            dtype = _get(delta, "type")
            if dtype == "text_delta":
                text = _get(delta, "text", "") or ""
                call.output_chars += len(text)
                if call.output_text is not None:
                    call.output_text.append(text)
            elif dtype == "input_json_delta":
                part = _get(delta, "partial_json", "") or ""
                call.output_chars += len(part)
                slot = self.blocks.get(_get(event, "index", 0))
                if slot is not None:
                    slot[1] += part
            elif dtype == "thinking_delta":
                call.output_chars += len(_get(delta, "thinking", "") or "")
        elif kind == "message_delta":
            usage = _get(event, "usage")
            if usage is not None and _get(usage, "output_tokens") is not None:
                self.output_tokens = _get(usage, "output_tokens")
            reason = _get(_get(event, "delta"), "stop_reason")
            if reason:
                call.finish_reasons = [reason]
        return True

    def apply(self) -> None:
        call = self.call
        if self.start_usage is not None:
            usage = usage_of(self.start_usage)
            if usage is not None:
                if self.output_tokens is not None:
                    usage.set_output(self.output_tokens)
                elif call.output_chars:
                    usage.output_tokens = max(usage.output_tokens, (call.output_chars + 3) // 4)
                call.usage = usage
        call.tool_calls = [(n, a or "{}", i) for n, a, i in (self.blocks[k] for k in sorted(self.blocks))]


def messages_content(body: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, list[msg.Message]]:
    """A messages request: `system` is system instructions; content blocks become typed parts."""
    system = body.get("system")
    out: list[msg.Message] = []
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else [content]
        parts: list[dict[str, Any]] = []
        for block in blocks:
            if not isinstance(block, dict):
                parts.extend(msg.content_parts(block))
            elif block.get("type") == "tool_use":
                parts.append(msg.tool_call(block.get("id"), block.get("name"), block.get("input")))
            elif block.get("type") == "tool_result":
                parts.append(msg.tool_response(block.get("tool_use_id"), _result_text(block.get("content"))))
            else:
                parts.extend(msg.content_parts([block]))
        out.append({"role": str(m.get("role", "user")), "parts": parts})
    return (msg.content_parts(system) if system else None), out


def _result_text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content


class AnthropicAdapter:
    provider = sc.PROVIDER_ANTHROPIC

    def describe(self, options: Any, stream: bool) -> ModelCall | None:
        if options.method.lower() != "post" or options.url != _MESSAGES:
            return None
        body = options.json_data if isinstance(options.json_data, dict) else {}
        limit = body.get("max_tokens")
        call = ModelCall(
            self.provider, sc.OP_CHAT, str(body.get("model", "")), limit if isinstance(limit, int) else None,
            stream or body.get("stream") is True,
        )
        call.prompt = (body, "messages")
        output = body.get("output_config")
        call.params = _params.read(body, _params.OPENAI_KEYS, stop="stop_sequences",
                                   output_format=output.get("format") if isinstance(output, dict) else None)
        return call

    def content(self, options: Any) -> tuple[Any, list[msg.Message]]:
        """The request's content in the conventions' message schema (only read when content is captured)."""
        return messages_content(options.json_data)

    def without_usage(self, options: Any, guard: Guard) -> bool:
        """Anthropic streams report their usage unasked: nothing is ever added for it."""
        return False

    def prepare(self, options: Any, call: ModelCall, guard: Guard | None) -> None:
        if getattr(options, "span_name", None) is not None:
            options.span_name = None  # our span replaces the SDK's own
        if guard is None:
            return
        if guard.max_output_tokens is not None and isinstance(options.json_data, dict):
            options.json_data = {**options.json_data, "max_tokens": guard.max_output_tokens}
        if guard.no_tools and isinstance(options.json_data, dict) and "tools" in options.json_data:
            # No tool call remains (max_tool_calls). The API wants the tools defined while the messages carry
            # tool_use blocks, so the request keeps them and may use none.
            options.json_data = {**options.json_data, "tool_choice": {"type": "none"}}

    def read(self, result: Any, call: ModelCall) -> None:
        call.usage = usage_of(_get(result, "usage"))
        call.response_model = _get(result, "model")
        call.response_id = _get(result, "id")
        reason = _get(result, "stop_reason")
        if reason:
            call.finish_reasons = [reason]
        for block in _get(result, "content", None) or ():
            btype = _get(block, "type")
            if btype == "tool_use":
                arguments = _get(block, "input", {})
                call.output_chars += _length(arguments)
                call.tool_calls.append((_get(block, "name", ""), arguments, _get(block, "id")))
            elif btype == "text":
                text = _get(block, "text", "") or ""
                call.output_chars += _length(text)  # the basis of the estimate when no usage is reported
                if call.output_text is not None:
                    call.output_text.append(text)
            elif btype == "thinking":
                call.output_chars += _length(_get(block, "thinking", ""))

    def accumulator(self, call: ModelCall, options: Any) -> Any:
        return MessageStream(call)

    def summarizer(self, client: Any, call: ModelCall) -> Any:
        model = call.model

        def summarize(prompt: str, max_tokens: int) -> Any:
            made = client.messages.create(
                model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}]
            )
            if hasattr(made, "__await__"):
                return _await_text(made)
            return "".join(_get(b, "text", "") or "" for b in made.content)

        return summarize


async def _await_text(made: Any) -> str:
    result = await made
    return "".join(_get(b, "text", "") or "" for b in result.content)


SPEC = AdapterSpec(
    requires=("anthropic >= 0.50, < 3",),
    patches=_request.client_points("anthropic._base_client", AnthropicAdapter()),
)
