"""`run()`: the context manager (sync and async) and decorator that opens a run, closes it and writes its outcome.

The budget decisions themselves live in `node.py` (RunNode); this module is the run's life around them.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterator
from contextvars import Token
from typing import Any, ParamSpec, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..model._text import error_detail
from ..model.budget import Budget, StopReason, Usage
from ..model.outcome import BudgetExceeded, RunOutcome
from ..model.signatures import canonical_arguments
from . import config
from . import ledger as lg
from .node import RunNode, _current, current_run
from .node_state import Admission
from .stops import _NO_MODEL_WRAP_UP, _WRAP_UP_MAX_TOKENS
from .wrapup import recorded_wrap_up, template_wrap_up

P = ParamSpec("P")
R = TypeVar("R")
RunT = TypeVar("RunT", bound="Run")
log = logging.getLogger(__name__)

__all__ = ["Admission", "Run", "RunNode", "canonical_arguments", "current_run", "run"]


class Run:
    """`run(name, budget=...)`: a context manager (sync and async) and a decorator that opens a run."""

    def __init__(self, name: str, budget: Budget | None = None, conversation_id: str | None = None) -> None:
        self.name = name
        self._budget = budget
        self._conversation_id = conversation_id
        self._node: RunNode | None = None
        self._token: Token[RunNode | None] | None = None
        self._otel_token: object | None = None
        self._span: Any = None
        self._outcome: RunOutcome | None = None

    def _prepare(self, node: RunNode) -> dict[str, Any]:
        """Hook for subclasses (a resumed run): set the new node up before its span starts; returns span options."""
        return {}

    # --- state --------------------------------------------------------------------------------------------

    @property
    def node(self) -> RunNode:
        if self._node is None:
            raise RuntimeError("this run has not started: use it as `with otel_budget.run(...) as run:`")
        return self._node

    @property
    def outcome(self) -> RunOutcome:
        """How the run ended (stop reason, limit, usage, wrap-up); known once the `with` block has ended."""
        if self._outcome is None:
            raise RuntimeError(
                f"run {self.name!r} has not ended yet: read run.outcome after its `with` block (inside it, "
                "run.usage and run.allows() tell how it is going)"
            )
        return self._outcome

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its outcome is known)."""
        return self._outcome is not None

    @property
    def budget(self) -> Budget:
        return self.node.budget

    @property
    def usage(self) -> Usage:
        return self.node.usage()

    def allows(self) -> bool:
        """True while one more model call fits the budget; the explicit loop shape `while run.allows():`."""
        return self.node.allows()

    def charge(self, usd: float, name: str = "charge") -> None:
        """Charge a cost that no instrumented client reports."""
        self.node.charge(usd, name)

    def checkpoint(self, state: Any) -> None:
        """Keep what the code needs to go on after an approval pause (e.g. the message list, kept by reference);
        it is saved, as JSON, in `outcome.paused.state`."""
        self.node.saved_state = state

    def complete(self, evidence: Any = None) -> None:
        """Confirm the work is done (what shows it, e.g. a count or an id, goes on the run span as
        `otel_budget.completion.evidence`). Under `Budget(confirm_done=True)` a run ends `done` only after this."""
        self.node.completion = (True, evidence)

    def incomplete(self, reason: str) -> None:
        """The model stopped but the work is not done: the run ends `incomplete`, saying `reason`."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"run.incomplete(reason={reason!r}): say in a few words what is not done, e.g. "
                             "run.incomplete('3 of 17 pages read')")
        node = self.node
        if node.stop_state is None:
            node.stop_state = (StopReason.INCOMPLETE, None, reason.strip())

    def stop(self, reason: StopReason | str = StopReason.CANCELLED, detail: str = "") -> None:
        """End the run early with `reason` (e.g. the code decided to give up)."""
        node = self.node
        try:
            reason = StopReason(reason)
        except ValueError:
            valid = ", ".join(r.value for r in StopReason)
            raise ValueError(f"run.stop(reason={reason!r}): not a stop reason; use one of {valid} (e.g. "
                             f"run.stop('cancelled', detail='...') to say in your words why)") from None
        if node.stop_state is None:
            node.stop_state = (reason, None, detail or f"stopped by the code ({reason.value}).")

    # --- context manager --------------------------------------------------------------------------------

    def __enter__(self: RunT) -> RunT:
        self._start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        suppress = self._finish_sync(exc)
        return suppress

    async def __aenter__(self: RunT) -> RunT:
        self._start()
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self.node.settle_open_calls()
        reason = self._reason_for(exc)
        text = await self._model_wrap_up_async(reason) if self._wants_model_wrap_up(reason) else None
        return self._close(exc, reason, text)

    def _start(self) -> None:
        if self._node is not None:
            raise RuntimeError("a Run object can be entered once; call otel_budget.run(...) again")
        parent = _current.get()
        settings = config.get()
        if not settings.instrumented:
            config.ensure_instrumented(self.name)  # the package's own instrument(), with its defaults
            settings = config.get()
        if settings.refusal is not None:
            raise ValueError(f"otel-budget refuses to start run {self.name!r}: {settings.refusal}")
        # A nested run without a budget is bounded by its ancestors only; a top run falls back to the default.
        budget = self._budget or (settings.default_budget if parent is None else None) or Budget()
        node = RunNode(self.name, budget, parent)
        if self._conversation_id is not None:
            node.conversation_id = str(self._conversation_id)
        self._node = node
        span_options = self._prepare(node)
        try:
            self._span = settings.telemetry.start_run(node, **span_options)
            ctx = trace.set_span_in_context(self._span)
            self._otel_token = otel_context.attach(ctx)
            span_ctx = self._span.get_span_context()
            if span_ctx.is_valid:
                node.trace_id = format(span_ctx.trace_id, "032x")
                node.span_id = format(span_ctx.span_id, "016x")
        except Exception:  # noqa: BLE001 - telemetry never breaks the run
            self._span = None
        if node.budget.wrap_up == "model":
            node.holdback = _holdback(node)
        self._token = _current.set(node)

    def _reason_for(self, exc: BaseException | None) -> StopReason:
        node = self.node
        if isinstance(exc, BudgetExceeded) and node.id in getattr(exc, "run_path", ()):
            return exc.reason
        if exc is not None:
            if isinstance(exc, (KeyboardInterrupt, GeneratorExit)) or type(exc).__name__ == "CancelledError":
                return StopReason.CANCELLED
            if node.truncated_by_budget and node.stop_state is not None:
                return node.stop_state[0]  # the framework failed on an answer the budget cut short
            return StopReason.ERROR
        if node.stop_state is not None:
            return node.stop_state[0]
        if node.budget.confirm_done and node.completion is None:
            node.stop_state = (StopReason.INCOMPLETE, None, "the run ended without run.complete() (confirm_done="
                               "True): the model stopped, but the code did not confirm the work is done.")
            return StopReason.INCOMPLETE
        return StopReason.DONE

    def _finish_sync(self, exc: BaseException | None) -> bool:
        self.node.settle_open_calls()  # before the wrap-up and the outcome: a stream left open still counts
        reason = self._reason_for(exc)
        text = self._model_wrap_up_sync(reason) if self._wants_model_wrap_up(reason) else None
        return self._close(exc, reason, text)

    def _wants_model_wrap_up(self, reason: StopReason) -> bool:
        node = self.node
        return reason not in _NO_MODEL_WRAP_UP and node.budget.wrap_up == "model" and node.summarize is not None

    def _close(self, exc: BaseException | None, reason: StopReason, model_text: str | None) -> bool:
        node = self.node
        node.closed = True  # from now on, calls from work that outlives the run are refused
        self._release_holdback()
        limit: str | None = None
        detail = ""
        if node.stop_state is not None and node.stop_state[0] is reason:
            _, limit, detail = node.stop_state
        elif isinstance(exc, BudgetExceeded):
            limit, detail = exc.limit, exc.message
        elif exc is not None and reason is StopReason.ERROR:
            detail = f"the run raised {error_detail(exc, config.get().capture_content)}"  # its text: capture only
        elif reason is StopReason.CANCELLED:
            detail = "the run was cancelled."
        outcome = node.snapshot(reason, limit, detail)
        outcome.wrap_up = template_wrap_up(node, outcome, model_text)
        node.outcome = self._outcome = outcome
        if self._token is not None:
            try:
                _current.reset(self._token)
            except ValueError:  # exited in another context (e.g. a generator finalized elsewhere)
                _current.set(node.parent)
        try:
            if self._span is not None:
                settings = config.get()
                outcome = node.outcome
                wrap_up = recorded_wrap_up(node, outcome, settings.capture_content) if outcome is not None else ""
                settings.telemetry.end_run(node, self._span, wrap_up)
        finally:
            if self._otel_token is not None:
                try:
                    otel_context.detach(self._otel_token)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001
                    pass
        return isinstance(exc, BudgetExceeded) and node.id in getattr(exc, "run_path", ())

    # --- model wrap-up ------------------------------------------------------------------------------------

    def _wrap_up_prompt(self, reason: StopReason) -> str:
        node = self.node
        draft = template_wrap_up(node, node.snapshot(reason, None, node.stop_state[2] if node.stop_state else ""), None)
        return (
            "An agent run was stopped by its budget before it finished. In at most 120 words, write its final "
            "report for the user: what was done, what is missing, and that the task is NOT complete. Do not "
            "claim anything the record does not show. The record:\n" + draft
        )

    def _release_holdback(self) -> None:
        node = self.node
        if node.holdback:
            lg.settle(node.accounts, node.holdback, {}, node.lock)
            node.holdback = None

    @contextlib.contextmanager
    def _wrap_up_call(self) -> Iterator[None]:
        """The one wrap-up call draws from the held-back slice, past the recorded stop; errors fall back."""
        node = self.node
        self._release_holdback()
        saved = node.stop_state
        node.stop_state = None
        try:
            yield
        finally:
            node.stop_state = saved

    def _model_wrap_up_sync(self, reason: StopReason) -> str | None:
        with self._wrap_up_call():
            try:
                result = self.node.summarize(self._wrap_up_prompt(reason), _WRAP_UP_MAX_TOKENS)  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - BudgetExceeded included: fall back to the template
                return None
        if inspect.isawaitable(result):  # an async client used from a sync run: no text
            result.close()  # type: ignore[attr-defined]
            return None
        return str(result) if result else None

    async def _model_wrap_up_async(self, reason: StopReason) -> str | None:
        with self._wrap_up_call():
            try:
                result = self.node.summarize(self._wrap_up_prompt(reason), _WRAP_UP_MAX_TOKENS)  # type: ignore[misc]
                if inspect.isawaitable(result):
                    result = await result
            except Exception:  # noqa: BLE001
                return None
        return str(result) if result else None

    # --- decorator --------------------------------------------------------------------------------------

    @overload
    def __call__(self, func: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R | RunOutcome]]:
        ...

    @overload
    def __call__(self, func: Callable[P, R]) -> Callable[P, R | RunOutcome]: ...

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Use as a decorator: every call of `func` is a fresh run. It returns what `func` returned when the run
        ended `done`, and the run's `RunOutcome` when it stopped (typed `R | RunOutcome`, so a checker makes the
        caller look)."""
        name, budget, conversation = self.name, self._budget, self._conversation_id
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                r = Run(name, budget, conversation)
                result: Any = None
                async with r:
                    result = await func(*args, **kwargs)
                return result if r.outcome.completed else r.outcome

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            r = Run(name, budget, conversation)
            result: Any = None
            with r:
                result = func(*args, **kwargs)
            return result if r.outcome.completed else r.outcome

        return wrapper


def run(name: str, budget: Budget | None = None, *, conversation_id: str | None = None) -> Run:
    """Open a budgeted run: `with otel_budget.run("agent", budget=Budget(max_steps=25)) as run: ...`.

    Nested runs draw from their ancestors' budgets too. With no budget, the one given to `instrument()` applies.
    `conversation_id` is recorded as `gen_ai.conversation.id` on the run span and every call span in the run.
    """
    return Run(name, budget, conversation_id)


def _holdback(node: RunNode) -> dict[str, float] | None:
    """Reserve a small slice at the start so a model-written wrap-up never breaks the cap."""
    amounts: dict[str, float] = {"steps": 1.0, "input_tokens": 800.0, "output_tokens": float(_WRAP_UP_MAX_TOKENS)}
    amounts["total_tokens"] = amounts["input_tokens"] + amounts["output_tokens"]
    usd = node.budget.max_usd
    if usd is not None:
        amounts["usd"] = min(usd * 0.05, 0.05)
    if lg.reserve(node.accounts, amounts, node.lock) is not None:
        return None
    return amounts
