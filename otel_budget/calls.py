"""One model call's life: check and reserve before it is sent, span it, settle it exactly once.

Instrumentation adapters fill a neutral `ModelCall` (what was asked, what came back) and drive a `Guard`;
the run decides, `telemetry` records. A nested instrumented call (LiteLLM over the openai SDK, say) is
passed through untouched, so no call is ever counted twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from . import config
from .budget import BudgetExceeded, StopReason
from .run import Admission, RunNode, current_run

log = logging.getLogger(__name__)

_IN_CALL: ContextVar[bool] = ContextVar("otel_budget_in_call", default=False)
#: Finish reasons (lowercased) of an answer cut at its output limit: chat, Responses, Anthropic, Gemini.
TRUNCATED = frozenset({"length", "incomplete", "max_tokens", "max_output_tokens"})


class TokenUsage:
    """Usage normalized to the conventions: input includes cached tokens, output includes reasoning."""

    __slots__ = ("input_tokens", "output_tokens", "cache_read", "cache_write", "reasoning")

    def __init__(
        self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0, reasoning: int = 0
    ) -> None:
        self.input_tokens = int(input_tokens or 0)
        self.output_tokens = int(output_tokens or 0)
        self.cache_read = int(cache_read or 0)
        self.cache_write = int(cache_write or 0)
        self.reasoning = int(reasoning or 0)

    def __repr__(self) -> str:
        return f"TokenUsage(in={self.input_tokens}, out={self.output_tokens}, cr={self.cache_read}, cw={self.cache_write})"


class ModelCall:
    """What one model call asked for and what came back, in provider-neutral terms."""

    __slots__ = (
        "provider", "operation", "model", "max_output_tokens", "stream", "usage", "response_model", "response_id",
        "finish_reasons", "tool_calls", "error", "cost_usd", "cost_input_usd", "cost_source", "turn", "capture",
        "reported_cost", "output_chars", "output_text", "injected_usage",
    )

    def __init__(self, provider: str, operation: str, model: str, max_output_tokens: int | None, stream: bool) -> None:
        self.provider = provider
        self.operation = operation
        self.model = model or "unknown"
        self.max_output_tokens = max_output_tokens
        self.stream = stream
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
        self.injected_usage = False  # we asked a stream for usage the caller did not ask for (a metered run)


class Guard:
    """Holds one admitted call until it is settled (finish, fail or abandon: whichever comes first, once)."""

    __slots__ = ("call", "node", "admission", "span", "started", "input_chars", "_done", "_lock", "__weakref__")

    def __init__(self, call: ModelCall, node: RunNode | None, admission: Admission | None, span: Any,
                 input_chars: Callable[[], int]) -> None:
        self.call = call
        self.node = node
        self.admission = admission
        self.span = span
        self.started = time.perf_counter()
        self.input_chars = input_chars
        self._done = False
        self._lock = threading.Lock()

    @property
    def max_output_tokens(self) -> int | None:
        """The output limit to put on the request, when the enforcer chose one (else None)."""
        adm = self.admission
        return adm.max_output_tokens if adm is not None and adm.set_max_tokens else None

    @property
    def needs_usage(self) -> bool:
        """True when the run limits tokens or money (its admission estimated the input), so a stream must report
        its usage; otherwise a stream's usage is read if the server sent it, else estimated."""
        adm = self.admission
        return adm is not None and adm.input_estimate > 0

    @property
    def timeout(self) -> float | None:
        """The time the run has left, to bound the call in flight (None: no time limit)."""
        return self.admission.timeout if self.admission is not None else None

    def _claim(self) -> bool:
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True

    def finish(self) -> None:
        """The call completed; `call.usage` holds what the API reported (or None)."""
        if self._claim():
            self._settle()

    def fail(self, error: BaseException) -> BaseException:
        """The call raised. Returns the exception to raise: a time stop when the run's time ran out."""
        if not self._claim():
            return error
        self.call.error = error
        self._settle()
        node = self.node
        if node is not None and node.deadline != float("inf") and node.time_left() <= 0:
            exc = node.stop(StopReason.TIME, "max_seconds", "the run's time ran out while a call was in flight.")
            exc.__cause__ = error
            return exc
        return error

    def send(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Send the admitted call. Instrumented calls nested inside pass through; a failure settles the call
        and may come back as a time stop (the run's time ran out while the call was in flight)."""
        token = _IN_CALL.set(True)
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            replaced = self.fail(exc)
            if replaced is exc:
                raise
            raise replaced from exc
        finally:
            _IN_CALL.reset(token)

    async def asend(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`send` for a coroutine function."""
        token = _IN_CALL.set(True)
        try:
            return await fn(*args, **kwargs)
        except BaseException as exc:
            replaced = self.fail(exc)
            if replaced is exc:
                raise
            raise replaced from exc
        finally:
            _IN_CALL.reset(token)

    def abandon(self) -> None:
        """The caller dropped a stream before its end: settle with what was seen."""
        if self._claim():
            self._settle()

    def _known_chars(self) -> int:
        """The request size if it was measured for the admission (never measured just for this)."""
        memo = getattr(self.input_chars, "memo", None)
        return memo[0] if memo else 0

    def _settle(self) -> None:
        call, node = self.call, self.node
        settings = config.get()
        try:
            usage = call.usage
            reported = usage is not None  # only reported usage calibrates the input estimate
            if usage is None and (call.error is None or call.output_chars or call.stream):
                # No usage reported (abandoned stream, raw response): the best estimate, never zero.
                est_in = self.admission.input_estimate if self.admission is not None else 0
                if not est_in:
                    est_in = self.input_chars() // 4
                if est_in or call.output_chars:
                    usage = TokenUsage(est_in, (call.output_chars + 3) // 4)
                    call.usage = usage
            if call.reported_cost is not None:
                call.cost_usd, call.cost_source = call.reported_cost, "reported"
            elif usage is not None:
                pricing = settings.prices.lookup(call.provider, call.model)
                if pricing is None and call.response_model and call.response_model != call.model:
                    pricing = settings.prices.lookup(call.provider, call.response_model)
                if pricing is not None:
                    call.cost_usd = pricing.cost(usage.input_tokens, usage.output_tokens, usage.cache_read,
                                                 usage.cache_write)
                    call.cost_input_usd = pricing.cost(usage.input_tokens, 0, usage.cache_read, usage.cache_write)
                    call.cost_source = "priced"
            elif call.error is not None:
                call.cost_usd, call.cost_source = 0.0, "priced"
            if node is not None and self.admission is not None:
                call.turn = self.admission.turn
                u = usage or TokenUsage(0, 0)
                node.settle(
                    self.admission,
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    cache_read=u.cache_read,
                    cache_write=u.cache_write,
                    reasoning=u.reasoning,
                    cost=call.cost_usd,
                    input_chars=chars if reported and (chars := self._known_chars()) and call.error is None else None,
                )
                if self.admission.set_max_tokens and _truncated(call.finish_reasons):
                    node.note_truncation(self.admission)
                if call.tool_calls:
                    node.record_tool_requests(list(call.tool_calls))
        except Exception:  # noqa: BLE001 - our bug must not break the agent
            log.warning("otel-budget: settling a call failed", exc_info=True)
        if self.span is not None:
            if settings.capture_content and call.output_text is not None:
                call.capture = dict(call.capture or {})
                from . import semconv as sc

                text = "".join(call.output_text)
                call.capture[sc.GEN_AI_OUTPUT_MESSAGES] = text
                call.capture[sc.OI_OUTPUT_VALUE] = text
            settings.telemetry.end_call(
                call, self.span, time.perf_counter() - self.started, node.root.name if node is not None else None
            )


def _truncated(finish_reasons: list[str]) -> bool:
    return any(str(r).lower().rsplit(".", 1)[-1] in TRUNCATED for r in finish_reasons)


def begin(call: ModelCall, input_chars: Callable[[], int], summarize: Callable[[str, int], Any] | None = None,
          capture_input: Callable[[], str] | None = None) -> Guard | None:
    """Admit a call: raises BudgetExceeded (or UnknownPriceError) when it does not fit; None for nested calls.

    `input_chars` is called only when a token or money limit needs an input estimate.
    """
    if _IN_CALL.get():
        return None
    node = current_run()
    admission = None
    chars: Callable[[], int] = input_chars
    if node is not None:
        memo: list[int] = []

        def counted() -> int:
            if not memo:
                memo.append(input_chars())
            return memo[0]

        counted.memo = memo  # type: ignore[attr-defined]
        admission = node.admit(call.provider, call.model, call.max_output_tokens, counted)
        if admission.set_max_tokens:
            call.max_output_tokens = admission.max_output_tokens
        chars = counted
        if summarize is not None:
            node.summarize = summarize
    settings = config.get()
    span = None
    try:
        span = settings.telemetry.start_call(call)
        if admission is not None and admission.shared:
            from . import semconv as sc

            span.set_attribute(sc.LEDGER_ENFORCED, all(r.enforced for r in admission.shared))
        if settings.capture_content and capture_input is not None:
            from . import semconv as sc

            text = capture_input()
            span.set_attribute(sc.GEN_AI_INPUT_MESSAGES, text)
            span.set_attribute(sc.OI_INPUT_VALUE, text)
            call.output_text = []
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not start a call span", exc_info=True)
    return Guard(call, node, admission, span, chars)


def in_call() -> ContextVar[bool]:
    """The context flag set while an instrumented call is being sent (adapters set and reset it)."""
    return _IN_CALL


__all__ = ["BudgetExceeded", "Guard", "ModelCall", "TokenUsage", "begin", "in_call"]
