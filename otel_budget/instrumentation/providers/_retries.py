"""SDK retry loops built on tenacity (LiteLLM's `num_retries`, google-genai's `HttpRetryOptions`), bounded by the
run's deadline as the openai and anthropic SDKs' own loops are (see `_request.retry_wrapper`).

While one of our calls is being sent with a time limit, a tenacity loop it runs gets a `before_sleep` hook: the
guard decides whether the retry after that sleep can start before the deadline (else `RetryCut`, which the
guard turns into the time stop), and the attempt gets the time left after the sleep as its timeout. Outside
such a call, tenacity runs as it was written (the cost: one context variable read per retry loop).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from ...core import calls
from ...core.calls import Guard
from .._spec import PatchPoint

log = logging.getLogger(__name__)


def _lower(retry_state: Any, timeout: float | None) -> None:
    """Give the next attempt `timeout` seconds: LiteLLM passes `timeout=` to each attempt, google-genai an
    HttpRequest whose `.timeout` (seconds) the attempt uses."""
    if timeout is None:
        return
    kwargs = retry_state.kwargs
    if isinstance(kwargs, dict) and "timeout" in kwargs:
        current = kwargs["timeout"]
        if not isinstance(current, (int, float)) or isinstance(current, bool) or current > timeout:
            kwargs["timeout"] = timeout
    request = retry_state.args[0] if retry_state.args else None
    if request is not None and hasattr(request, "timeout") and hasattr(request, "url"):
        current = request.timeout
        if not isinstance(current, (int, float)) or current > timeout:
            request.timeout = timeout


def _check(guard: Guard, retry_state: Any) -> None:
    outcome = retry_state.outcome
    failed = outcome.exception() if outcome is not None and outcome.failed else None
    timeout = guard.retry_timeout(float(retry_state.upcoming_sleep or 0.0), failed)  # RetryCut propagates
    try:
        _lower(retry_state, timeout)
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not lower a retry's timeout", exc_info=True)


def _sync_hook(guard: Guard, before: Any) -> Any:
    def before_sleep(retry_state: Any) -> None:
        if before is not None:
            before(retry_state)
        _check(guard, retry_state)

    return before_sleep


def _async_hook(guard: Guard, before: Any) -> Any:
    async def before_sleep(retry_state: Any) -> None:
        if before is not None:
            made = before(retry_state)
            if inspect.isawaitable(made):
                await made
        _check(guard, retry_state)

    return before_sleep


def _bounded(instance: Any, wrapped: Any, hook: Any) -> Any | None:
    """A copy of the retrying object with our hook, and the unwrapped `__call__` to run it; None to leave it."""
    guard = calls.sending()
    func = getattr(wrapped, "__func__", None)
    if guard is None or guard.timeout is None or func is None:
        return None
    try:
        return func, instance.copy(before_sleep=hook(guard, instance.before_sleep))
    except Exception:  # noqa: BLE001 - our bug: the loop runs unbounded
        log.debug("otel-budget: could not bound a tenacity retry loop", exc_info=True)
        return None


def _call(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    bounded = _bounded(instance, wrapped, _sync_hook)
    if bounded is None:
        return wrapped(*args, **kwargs)
    func, copy = bounded
    return func(copy, *args, **kwargs)


async def _acall(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    bounded = _bounded(instance, wrapped, _async_hook)
    if bounded is None:
        return await wrapped(*args, **kwargs)
    func, copy = bounded
    return await func(copy, *args, **kwargs)


#: tenacity's retry loops run inside our calls, bounded by the run's deadline (present only where a library brings
#: tenacity).
TENACITY = (PatchPoint("tenacity", "Retrying.__call__", _call, optional=True),
            PatchPoint("tenacity.asyncio", "AsyncRetrying.__call__", _acall, optional=True))
