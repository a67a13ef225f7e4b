"""One model call's life: check and reserve before it is sent, span it, settle it exactly once.

Instrumentation adapters fill a neutral `ModelCall` (what was asked, what came back) and drive a `Guard`;
the run decides, `telemetry` records. A nested instrumented call (LiteLLM over the openai SDK, say) is
passed through untouched, so no call is ever counted twice.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ..model.budget import StopReason
from ..model.call import ModelCall, TokenUsage
from ..model.outcome import BudgetExceeded
from . import config
from .run import Admission, RunNode, current_run

log = logging.getLogger(__name__)

#: The guard of the call this context is sending (None: none). Set while an instrumented call is sent, so a call
#: nested inside it passes through uncounted; the SDK's retry loop asks it whether a retry still fits. One variable
#: for both: a call sets and resets one context variable, not two.
_SENDING: ContextVar[Guard | None] = ContextVar("otel_budget_sending", default=None)
#: Finish reasons (lowercased) of an answer cut at its output limit: chat, Responses, Anthropic, Gemini.
TRUNCATED = frozenset({"length", "incomplete", "max_tokens", "max_output_tokens"})


class RetryCut(Exception):
    """Raised inside an SDK's retry loop when its next attempt would start after the run's deadline."""

    content_free = True  # its message is ours (a delay and the deadline)


def _retry_cut(error: BaseException) -> RetryCut | None:
    """The RetryCut in `error` or what it was raised from (an SDK may wrap the cut of a retry loop it runs inside
    its own, as LiteLLM wraps the openai SDK's), else None."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None or isinstance(seen, RetryCut):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class Guard:
    """Holds one admitted call until it is settled (finish, fail or abandon: whichever comes first, once)."""

    __slots__ = (
        "call", "node", "admission", "span", "started", "input_chars", "deadline", "reader", "_open", "__weakref__",
        "max_output_tokens", "no_tools", "needs_usage",
    )

    def __init__(self, call: ModelCall, node: RunNode | None, admission: Admission | None, span: Any,
                 input_chars: Callable[[], int]) -> None:
        self.call = call
        self.node = node
        self.admission = admission
        self.span = span
        self.started = time.perf_counter()
        self.input_chars = input_chars
        #: `time.monotonic()` by which the whole call must end (inf: no time limit).
        self.deadline = math.inf
        if node is not None and node.deadline != math.inf:
            self.deadline = node.deadline + node._paused_chain()  # now + node.time_left()
        #: A stream's reader (`apply()` writes what it saw into `call`), applied when the call is abandoned.
        self.reader: Any = None
        #: One item while the call is open: settling pops it, and `list.pop` is atomic, so exactly one of the paths
        #: that may settle (finish, fail, abandon, expire: from any thread or the garbage collector) gets it. No lock
        #: is made or taken per call.
        self._open = [True]
        #: The output limit to put on the request, when the enforcer chose one (else None).
        self.max_output_tokens: int | None = None
        #: True when no tool call remains (max_tool_calls): the adapter sends the request without its tools.
        self.no_tools = False
        #: True inside any run (whatever its limits): a stream must report its usage, so the run's figures are exact.
        #: Outside runs a stream's usage is read if the server sent it, else estimated (and marked).
        self.needs_usage = node is not None
        if admission is not None:
            if admission.set_max_tokens:
                self.max_output_tokens = admission.max_output_tokens
            self.no_tools = admission.no_tools
        if node is not None:
            node.open_calls.add(self)

    @property
    def timeout(self) -> float | None:
        """The time the run has left, to bound the call in flight (None: no time limit)."""
        if self.deadline == math.inf:
            return None
        left = self.deadline - time.monotonic()
        return left if left > 0.001 else 0.001

    def retry_timeout(self, delay: float, failed: BaseException | None = None) -> float | None:
        """The SDK waits `delay` seconds, then sends the call again (after the attempt that raised `failed`): the
        timeout of that attempt (None: no time limit). Raises `RetryCut` when the attempt would start after the
        deadline."""
        if self.deadline == math.inf:
            return None
        left = self.deadline - time.monotonic() - delay
        if left <= 0:
            cut = RetryCut(f"the SDK's retry in {delay:.3g} s would start after the run's deadline")
            if failed is not None:
                cut.__context__ = failed  # what the call failed with, as when raised inside the SDK's except block
            raise cut
        return left

    def _claim(self) -> bool:
        try:
            self._open.pop()
        except IndexError:  # settled already
            return False
        if self.node is not None:
            self.node.open_calls.discard(self)
        return True

    def _time_stop(self, detail: str) -> BudgetExceeded:
        assert self.node is not None  # a deadline comes from a run
        return self.node.stop(StopReason.TIME, "max_seconds", detail)

    def _out_of_time(self, error: BaseException) -> bool:
        return _retry_cut(error) is not None or time.monotonic() >= self.deadline

    def finish(self) -> None:
        """The call completed; `call.usage` holds what the API reported (or None)."""
        if self._claim():
            self._settle()

    def fail(self, error: BaseException) -> BaseException:
        """The call raised. Returns the exception to raise: a time stop when the run's time ran out (an SDK
        timeout at the deadline, or a retry cut because it would start after it)."""
        if not self._claim():
            return error
        out_of_time = not isinstance(error, BudgetExceeded) and self._out_of_time(error)
        cause = error.__context__ if isinstance(error, RetryCut) and error.__context__ is not None else error
        self.call.error = cause
        self._settle()
        if out_of_time:
            detail = "the run's time ran out while a call was in flight."
            cut = _retry_cut(error)
            if cut is not None:
                detail = f"the call failed and {cut} (max_seconds)."
            exc = self._time_stop(detail)
            exc.__cause__ = cause
            return exc
        return error

    def expire(self) -> BudgetExceeded:
        """The deadline passed while the answer was still streaming: settle with what was seen (once) and
        return the time stop to raise. The caller closes the stream."""
        if self._claim():
            self.call.error = TimeoutError("the run's time (max_seconds) ran out while the answer was streaming")
            self._settle()
        return self._time_stop("the run's time ran out while an answer was streaming; the stream was closed.")

    def send(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Send the admitted call. Instrumented calls nested inside pass through; a failure settles the call
        and may come back as a time stop (the run's time ran out while the call was in flight)."""
        token = _SENDING.set(self)
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            replaced = self.fail(exc)
            if replaced is exc:
                raise
            raise replaced from exc
        finally:
            _SENDING.reset(token)

    async def asend(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`send` for a coroutine function."""
        token = _SENDING.set(self)
        try:
            return await fn(*args, **kwargs)
        except BaseException as exc:
            replaced = self.fail(exc)
            if replaced is exc:
                raise
            raise replaced from exc
        finally:
            _SENDING.reset(token)

    def abandon(self) -> None:
        """The caller dropped a stream before its end (or its run ended first): settle with what was seen."""
        if self._claim():
            reader = self.reader
            if reader is not None:
                try:
                    reader.apply()
                except Exception:  # noqa: BLE001
                    log.debug("otel-budget: stream reader failed", exc_info=True)
            self._settle()

    def _known_chars(self) -> int:
        """The request size if it was measured for the admission (never measured just for this)."""
        chars = self.input_chars
        return chars.known if isinstance(chars, Measured) and chars.known is not None else 0

    def _estimated(self, usage: TokenUsage | None) -> TokenUsage | None:
        """Usage with what was not reported estimated: input from the admission, output from the text seen."""
        est_in = self.admission.input_estimate if self.admission is not None else 0
        if not est_in:
            est_in = self.input_chars() // 4
        est_out = (self.call.output_chars + 3) // 4
        if usage is None:
            return TokenUsage(est_in, est_out) if est_in or est_out else None
        if "input_tokens" in usage.missing:
            usage.input_tokens = max(est_in, usage.cache_read + usage.cache_write)
        if "output_tokens" in usage.missing:
            usage.output_tokens = max(est_out, usage.reasoning)
        usage.missing = frozenset()
        return usage

    def _believed(self, usage: TokenUsage | None) -> tuple[TokenUsage | None, bool]:
        """The usage to count when some of it was not reported or is not believed (no input at all, or no output for
        an answer with text), estimated where it must be; and whether the input count was reported."""
        call = self.call
        if usage is not None:
            if usage.input_tokens == 0:
                usage.missing |= {"input_tokens"}
            if usage.output_tokens == 0 and call.output_chars:
                usage.missing |= {"output_tokens"}
            reported_input = "input_tokens" not in usage.missing
            if usage.problems:
                log.warning("otel-budget: the usage reported for a call to %s makes no sense (%s); counted as "
                            "0 when negative, else estimated", call.model, ", ".join(usage.problems))
            if usage.missing:
                usage = call.usage = self._estimated(usage)
                call.usage_estimated = True
            return usage, reported_input
        if call.error is None or call.output_chars or call.stream:
            # No usage reported (abandoned stream, raw response): the best estimate, never zero.
            usage = self._estimated(None)
            call.usage = usage
            call.usage_estimated = usage is not None
        return usage, False

    def _check_reported_cost(self) -> None:
        """A cost the provider reported that is no amount of money is dropped: the call is priced from its usage."""
        call = self.call
        cost = call.reported_cost
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
            log.warning("otel-budget: a call to %s reported a cost of %r; priced from its usage instead",
                        call.model, call.reported_cost)
            call.reported_cost = None

    def _settle(self) -> None:
        call, node = self.call, self.node
        settings = config.get()
        try:
            usage = call.usage
            # The usual case in few lines (every count reported and believable); the rest in `_believed`.
            if (usage is not None and usage.input_tokens and not usage.missing and not usage.problems
                    and (usage.output_tokens or not call.output_chars)):
                reported_input = True
            else:
                usage, reported_input = self._believed(usage)
            if call.reported_cost is not None:
                self._check_reported_cost()
            if call.reported_cost is not None:
                call.cost_usd, call.cost_source = call.reported_cost, "reported"
            elif usage is not None:
                # (the price the admission looked up for the money cap, else the table's)
                pricing = (self.admission.pricing if self.admission is not None and self.admission.pricing is not None
                           else settings.prices.lookup(call.provider, call.model))
                if pricing is None and call.response_model and call.response_model != call.model:
                    pricing = settings.prices.lookup(call.provider, call.response_model)
                if pricing is not None:
                    call.cost_usd = pricing.cost(usage.input_tokens, usage.output_tokens, usage.cache_read,
                                                 usage.cache_write)
                    if settings.telemetry.openinference:  # only the OpenInference twins split the cost
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
                    input_chars=chars if (chars := self._known_chars()) and call.error is None and reported_input
                    else None,
                )
                if self.admission.set_max_tokens and _truncated(call.finish_reasons):
                    node.note_truncation(self.admission)
                if call.tool_calls:
                    node.record_tool_requests(list(call.tool_calls))
        except Exception:  # noqa: BLE001 - our bug must not break the agent
            log.warning("otel-budget: settling a call failed", exc_info=True)
        if self.span is not None:
            if settings.capture_content and call.output_text is not None and call.error is None:
                _capture_output(call)
            settings.telemetry.end_call(
                call, self.span, time.perf_counter() - self.started, node.root.name if node is not None else None,
                settings.capture_content,
            )


def _truncated(finish_reasons: list[str]) -> bool:
    return any(str(r).lower().rsplit(".", 1)[-1] in TRUNCATED for r in finish_reasons)


def begin(call: ModelCall, input_chars: Callable[[], int],
          summarizer: Callable[..., Callable[[str, int], Any] | None] | None = None,
          capture_input: Callable[..., Any] | None = None, hook_args: tuple[Any, ...] = ()) -> Guard | None:
    """Admit a call: raises BudgetExceeded (or UnknownPriceError) when it does not fit; None for nested calls.

    `input_chars` is called only when a token or money limit needs an input estimate. `summarizer(*hook_args)` makes
    the function (prompt, max_tokens) -> text that asks the same model for a run's wrap-up; it is called only in a
    run whose budget asks for that wrap-up (`wrap_up="model"`). `capture_input(*hook_args)` gives the request's
    content, called only when content is captured. (An adapter passes module functions and their arguments: no
    partial or closure is made per call for what most calls never use.)
    """
    if _SENDING.get() is not None:
        return None
    node = current_run()
    admission = None
    chars: Callable[[], int] = input_chars
    if node is not None:
        counted = input_chars if isinstance(input_chars, Measured) else _Counted(input_chars)
        source = call.results or call.prompt
        if source is not None:  # the tool results this request carries: a stall stops it before it is sent
            node.read_results(*source)
        admission = node.admit(call.provider, call.model, call.max_output_tokens, counted, call.choices, call.prompt)
        if admission.set_max_tokens:
            call.max_output_tokens = admission.max_output_tokens
        chars = counted
        if summarizer is not None and node.budget.wrap_up == "model":
            node.summarize = summarizer(*hook_args)
    settings = config.get()
    span = None
    if node is not None and node.conversation_id is not None and call.conversation_id is None:
        call.conversation_id = node.conversation_id
    try:
        span = settings.telemetry.start_call(call)
        if admission is not None and admission.shared:
            from ..telemetry import semconv as sc

            span.set_attribute(sc.LEDGER_ENFORCED, all(r.enforced for r in admission.shared))
        if settings.capture_content and capture_input is not None:
            call.capture = _input_capture(capture_input(*hook_args), settings.telemetry.openinference)
            call.output_text = []
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not start a call span", exc_info=True)
    return Guard(call, node, admission, span, chars)


class Measured:
    """A request size, measured at most once (for the admission, then the settlement's chars-per-token): a
    subclass says how (`measure`); an adapter that passes one to `begin` gets it back measured."""

    __slots__ = ("known",)

    def __init__(self) -> None:
        self.known: int | None = None

    def measure(self) -> int:
        raise NotImplementedError

    def __call__(self) -> int:
        if self.known is None:
            self.known = self.measure()
        return self.known


class _Counted(Measured):
    """A size function, measured at most once."""

    __slots__ = ("_measure",)

    def __init__(self, measure: Callable[[], int]) -> None:
        self.known = None
        self._measure = measure

    def measure(self) -> int:
        return self._measure()


def _input_capture(captured: Any, openinference: bool) -> dict[str, Any]:
    """Content attributes of a request: (system instructions, messages) from an adapter, or legacy text."""
    from ..telemetry import messages
    from ..telemetry import semconv as sc

    if isinstance(captured, tuple):
        return messages.input_attributes(*captured, openinference=openinference)
    if openinference:
        return {sc.GEN_AI_INPUT_MESSAGES: captured, sc.OI_INPUT_VALUE: captured}
    return {sc.GEN_AI_INPUT_MESSAGES: captured}


def _capture_output(call: ModelCall) -> None:
    """Add the answer (text and tool calls, in the conventions' message schema) to the call's content."""
    from ..telemetry import messages

    try:
        answer = messages.output_messages(call.output_text, call.tool_calls, call.finish_reasons)
        attrs = messages.output_attributes(answer, openinference=config.get().telemetry.openinference)
        call.capture = {**(call.capture or {}), **attrs}
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not record the answer's content", exc_info=True)


def in_call() -> ContextVar[Guard | None]:
    """The context variable that is set (to the call's guard: truthy) while an instrumented call is being sent."""
    return _SENDING


def sending() -> Guard | None:
    """The guard of the call this context is sending right now, or None."""
    return _SENDING.get()


__all__ = ["BudgetExceeded", "Guard", "Measured", "ModelCall", "RetryCut", "TokenUsage", "begin", "in_call", "sending"]
