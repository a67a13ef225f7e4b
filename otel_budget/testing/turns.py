"""Scripted turns, recorded requests, and the per-request plan derived from them."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """A tool call the scripted model requests."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    """A dict, sent as its JSON; or JSON text, sent exactly as given (OpenAI APIs: e.g. arguments nested deeper
    than `json.dumps` can encode)."""
    id: str | None = None
    """Call id on the wire; ``None`` gives a fresh ``call_<n>`` on every response."""


def arguments_text(tc: ToolCall) -> str:
    """The JSON text of a tool call's arguments as the wire carries it."""
    return tc.arguments if isinstance(tc.arguments, str) else json.dumps(tc.arguments)


@dataclass
class Turn:
    """One scripted model answer: text and/or tool calls, usage, timing and failure modes."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int | None = None
    """Includes cached tokens; ``None`` estimates ``len(raw request body) // 4`` (at least 1)."""
    output_tokens: int | None = None
    """Includes reasoning tokens; ``None`` estimates ``len(text + tool args JSON) // 4`` (at least 1)."""
    cache_read_tokens: int = 0
    """Part of ``input_tokens``."""
    cache_write_tokens: int = 0
    """Part of ``input_tokens``."""
    reasoning_tokens: int = 0
    """Part of ``output_tokens``."""
    delay: float = 0.0
    """Seconds to wait before the first byte of the answer."""
    chunk_delay: float = 0.0
    """Seconds between stream events."""
    status: int = 200
    """Anything but 200 answers with the provider's error JSON and this HTTP status."""
    error_message: str = "scripted error"
    retry_after: float | None = None
    """Error answers: the ``Retry-After`` header, in seconds (``None``: only a 429 gets one, of 0)."""
    model: str | None = None
    """Model named in the response; ``None`` echoes the request's model."""
    chunks: int | None = None
    """Streaming: number of text deltas (default: about one per word, at most 20)."""
    break_stream_after: int | None = None
    """Streaming: drop the connection abruptly after this many events."""
    malformed: bool = False
    """Streaming: send one event whose data is not JSON."""
    report_usage: bool = True
    """Non-streamed: ``False`` leaves the usage out of the response, as some compatible servers do."""
    stream_usage: bool | None = None
    """OpenAI chat streaming: send the usage chunk (True) or not (False) whatever ``stream_options`` asks, as some
    servers do; ``None`` follows the request's ``include_usage``."""
    usage_before_finish: bool = False
    """OpenAI chat streaming: the usage-only chunk comes before the answer's last chunk (the one with its finish
    reason) instead of after it, an order a compatible server may use."""


@dataclass
class RecordedRequest:
    """A request as the server received it; ``headers`` keys are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    api: str
    """One of ``openai.chat``, ``openai.responses``, ``anthropic.messages``."""
    received: float = field(default_factory=time.monotonic)
    """When the server received it (``time.monotonic()``): e.g. to check that no retry started after a deadline."""

    @property
    def model(self) -> str | None:
        """The ``model`` field of the request body."""
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        """Whether the request asked for a stream."""
        return bool(self.body.get("stream"))


@dataclass
class Plan:
    """What one response carries, resolved from a Turn and the request."""

    text: str
    tool_calls: list[ToolCall]
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    truncated: bool

    @property
    def stop_kind(self) -> str:
        """``length``, ``tool`` or ``stop``: the neutral finish reason."""
        if self.truncated:
            return "length"
        return "tool" if self.tool_calls else "stop"


def output_limit(api: str, body: dict[str, Any]) -> int | None:
    """The output-token limit the request sets, if any."""
    keys = {
        "openai.chat": ("max_tokens", "max_completion_tokens"),
        "openai.responses": ("max_output_tokens",),
        "anthropic.messages": ("max_tokens",),
    }[api]
    limits = [v for k in keys if isinstance(v := body.get(k), int) and not isinstance(v, bool)]
    return min(limits) if limits else None


def make_plan(turn: Turn, api: str, body: dict[str, Any], raw_len: int, next_id: Any) -> Plan:
    """Resolve token counts, truncation and call ids for one answer."""
    text = turn.text or ""
    args_json = "".join(arguments_text(tc) for tc in turn.tool_calls)
    cached = turn.cache_read_tokens + turn.cache_write_tokens
    input_tokens = turn.input_tokens if turn.input_tokens is not None else max(1, raw_len // 4)
    input_tokens = max(input_tokens, cached)
    output = turn.output_tokens if turn.output_tokens is not None else max(1, len(text + args_json) // 4)
    tool_calls = [
        ToolCall(tc.name, tc.arguments if isinstance(tc.arguments, str) else dict(tc.arguments),
                 tc.id or f"call_{next_id()}")
        for tc in turn.tool_calls
    ]
    limit = output_limit(api, body)
    truncated = limit is not None and limit < output
    if truncated:
        assert limit is not None
        text = text[: len(text) * max(limit, 0) // output] if output else ""
        output = max(limit, 0)
        tool_calls = []
    model = turn.model or body.get("model") or "scripted-model"
    return Plan(
        text=text,
        tool_calls=tool_calls,
        model=str(model),
        input_tokens=input_tokens,
        output_tokens=output,
        cache_read_tokens=turn.cache_read_tokens,
        cache_write_tokens=turn.cache_write_tokens,
        reasoning_tokens=min(turn.reasoning_tokens, output),
        truncated=truncated,
    )


def split_text(text: str, chunks: int | None) -> list[str]:
    """Split text into stream deltas: ``chunks`` slices, or about one per word (at most 20)."""
    if not text:
        return []
    if chunks is not None:
        n = max(1, min(chunks, len(text)))
        bounds = [len(text) * i // n for i in range(n + 1)]
        return [text[bounds[i] : bounds[i + 1]] for i in range(n)]
    words = re.findall(r"\s*\S+\s*|\s+", text)
    if len(words) <= 20:
        return words
    per = -(-len(words) // 20)
    return ["".join(words[i : i + per]) for i in range(0, len(words), per)]


def split_args(arguments: str) -> list[str]:
    """Split a tool call's JSON arguments into two deltas, as providers stream them."""
    if len(arguments) < 2:
        return [arguments]
    mid = len(arguments) // 2
    return [arguments[:mid], arguments[mid:]]
