"""Threads and thread pools started inside a run carry its context, as asyncio tasks do: their calls draw from the
run and their spans join its trace.

`threading.Thread.start` (so `Timer` too) and `ThreadPoolExecutor.submit` (which `map` and `loop.run_in_executor`
go through) copy the caller's context when a run is current, and the thread or task runs in that copy. Outside a
run nothing changes. `ProcessPoolExecutor` is not covered: another process does not share the run's ledger.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from typing import Any

from ..core.node import current_run
from ._spec import AdapterSpec, PatchPoint

log = logging.getLogger(__name__)

#: Set while a pool's `submit` runs: the worker thread it may start must not keep the submitter's context.
_IN_SUBMIT: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_budget_in_submit", default=False)


def _start(wrapped: Any, instance: threading.Thread, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if current_run() is None or _IN_SUBMIT.get():
        return wrapped(*args, **kwargs)
    try:
        ctx = contextvars.copy_context()
        own = instance.__dict__.get("run")
        target = instance.run  # bound now, so a subclass's own run() is the one that runs in the context

        def run_in_context() -> None:
            try:
                ctx.run(target)
            finally:
                _restore_run(instance, own)

        instance.run = run_in_context  # type: ignore[method-assign]
    except Exception:  # noqa: BLE001 - our bug must not stop the thread from starting
        log.debug("otel-budget: could not carry the run into a thread", exc_info=True)
        return wrapped(*args, **kwargs)
    try:
        return wrapped(*args, **kwargs)
    except BaseException:
        _restore_run(instance, own)
        raise


def _restore_run(instance: threading.Thread, own: Any) -> None:
    if own is None:
        instance.__dict__.pop("run", None)
    else:
        instance.__dict__["run"] = own


def _submit(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not args or current_run() is None:
        return wrapped(*args, **kwargs)
    task = functools.partial(contextvars.copy_context().run, args[0])
    token = _IN_SUBMIT.set(True)
    try:
        return wrapped(task, *args[1:], **kwargs)
    finally:
        _IN_SUBMIT.reset(token)


#: `Thread.start` and `ThreadPoolExecutor.submit`; `uninstrument()` restores both by identity.
SPEC = AdapterSpec(requires=(), patches=(PatchPoint("threading", "Thread.start", _start),
                                         PatchPoint("concurrent.futures.thread", "ThreadPoolExecutor.submit", _submit)))
