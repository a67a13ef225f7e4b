"""One model call as neutral data: what adapters extract from a provider's request and response."""

from __future__ import annotations

import math
from typing import Any

_NONE: frozenset[str] = frozenset()


class TokenUsage:
    """Usage normalized to the conventions: input includes cached tokens, output includes reasoning.

    Counts a server sends are not trusted blindly: a negative count is read as 0, and a missing (None),
    NaN, infinite or non-numeric input or output count as not reported (`missing`), so the call is settled
    to the best estimate instead. `problems` says what was wrong, for one warning per call.
    """

    __slots__ = ("input_tokens", "output_tokens", "cache_read", "cache_write", "reasoning", "missing", "problems")

    def __init__(
        self, input_tokens: Any, output_tokens: Any, cache_read: Any = 0, cache_write: Any = 0, reasoning: Any = 0
    ) -> None:
        #: Counts not reported (a new set when one is added: most usage has none, so none is made per call).
        self.missing: frozenset[str] = _NONE
        self.problems: tuple[str, ...] = ()
        # A plain non-negative int (what servers send) is taken as it is; anything else is read by _count.
        self.input_tokens = (input_tokens if type(input_tokens) is int and input_tokens >= 0
                             else self._count("input_tokens", input_tokens, required=True))
        self.output_tokens = (output_tokens if type(output_tokens) is int and output_tokens >= 0
                              else self._count("output_tokens", output_tokens, required=True))
        self.cache_read = cache_read if type(cache_read) is int and cache_read >= 0 else self._count("cache_read", cache_read)
        self.cache_write = (cache_write if type(cache_write) is int and cache_write >= 0
                            else self._count("cache_write", cache_write))
        self.reasoning = reasoning if type(reasoning) is int and reasoning >= 0 else self._count("reasoning", reasoning)

    def _count(self, name: str, value: Any, required: bool = False) -> int:
        if value is None:
            if required:
                self.missing |= {name}
            return 0
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.problems += (f"{name}={value!r}",)
            if required:
                self.missing |= {name}
            return 0
        if value < 0:
            self.problems += (f"{name}={value!r}",)
            return 0
        return int(value)

    def set_output(self, value: Any) -> None:
        """Replace the output count (a stream's final count), read as the constructor reads it."""
        self.missing -= {"output_tokens"}
        self.output_tokens = self._count("output_tokens", value, required=True)

    def __repr__(self) -> str:
        return f"TokenUsage(in={self.input_tokens}, out={self.output_tokens}, cr={self.cache_read}, cw={self.cache_write})"


class ModelCall:
    """What one model call asked for and what came back, in provider-neutral terms."""

    __slots__ = (
        "provider", "operation", "model", "max_output_tokens", "stream", "usage", "response_model", "response_id",
        "finish_reasons", "tool_calls", "error", "cost_usd", "cost_input_usd", "cost_source", "turn", "capture",
        "reported_cost", "output_chars", "output_text", "injected_usage", "usage_estimated", "choices", "prompt", "results",
        "params", "server", "conversation_id", "base_url",
    )

    def __init__(self, provider: str, operation: str, model: str, max_output_tokens: int | None, stream: bool,
                 choices: Any = 1) -> None:
        self.provider = provider
        self.operation = operation
        self.model = model or "unknown"
        self.max_output_tokens = (max_output_tokens if max_output_tokens is None or _is_count(max_output_tokens)
                                  else None)
        self.stream = stream
        # How many answers the request asks for (OpenAI `n`, Gemini `candidateCount`): each may write up to the
        # output limit.
        self.choices = (choices if type(choices) is int and choices >= 1  # (None, the usual case, needs no call)
                        else 1 if choices is None or not _is_count(choices) or choices < 1 else choices)
        # The request body and the key of its message list, for a tighter input bound (see RunNode.admit).
        self.prompt: tuple[dict[str, Any], str] | None = None
        # Where the request's tool results are (body, key), when not in `prompt`: read for stalls before admission.
        self.results: tuple[Any, str] | None = None
        self.usage: TokenUsage | None = None
        self.response_model: str | None = None
        self.response_id: str | None = None
        self.finish_reasons: list[str] = []
        self.tool_calls: list[tuple[str, Any, str | None]] = []
        self.error: BaseException | None = None
        self.cost_usd: float | None = None
        self.cost_input_usd: float | None = None
        self.cost_source = "unpriced"
        self.turn = 0
        self.capture: dict[str, Any] | None = None
        self.reported_cost: float | None = None
        self.output_chars = 0
        self.output_text: list[str] | None = None
        self.injected_usage = False  # we asked a stream for usage the caller did not ask for (inside a run)
        self.usage_estimated = False  # some of `usage` was estimated, not reported (marked on the span)
        self.base_url: str | None = None  # the client's base URL (a server that rejects a request field is remembered)
        self.params: dict[str, Any] | None = None  # request parameters: semconv attribute -> value
        self.server: tuple[str, int | None] | None = None  # (server.address, server.port)
        self.conversation_id: str | None = None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
