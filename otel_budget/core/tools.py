"""`@tool`: a plain or paid tool, checked against the run's budget before it runs, spanned, and charged."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from ..model.budget import check_cost
from . import config
from .run import current_run

F = TypeVar("F", bound=Callable[..., Any])
_REPLAYED = object()  # marks a tool call answered from a paused run's record


def _arguments(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(func).bind_partial(*args, **kwargs)
        return dict(bound.arguments)
    except (TypeError, ValueError):
        return {"args": list(args), **kwargs}


@overload
def tool(func: F) -> F: ...
@overload
def tool(*, cost_usd: float = 0.0, name: str | None = None) -> Callable[[F], F]: ...


def tool(func: Any = None, *, cost_usd: float = 0.0, name: str | None = None) -> Any:
    """Decorate a tool function. Inside a run it counts as a tool call, is checked before it runs (tool-call
    cap, repetition, time, and `cost_usd` against max_usd) and charged after; outside a run it is only spanned.
    """
    cost_usd = check_cost(cost_usd, "tool(cost_usd=...)")

    def decorate(fn: F) -> F:
        tool_name = name or fn.__name__
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                state = _before(fn, tool_name, cost_usd, args, kwargs)
                if state[0] is _REPLAYED:
                    return state[1]
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as exc:
                    _after(state, None, exc)
                    raise
                _after(state, result, None)
                return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            state = _before(fn, tool_name, cost_usd, args, kwargs)
            if state[0] is _REPLAYED:
                return state[1]
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _after(state, None, exc)
                raise
            _after(state, result, None)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate


def _before(fn: Callable[..., Any], name: str, cost: float, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    node = current_run()
    settings = config.get()
    arguments = _arguments(fn, args, kwargs)
    if node is not None and node.approval is not None:
        replayed = node.approval.replay(name, arguments)
        if replayed is not None:  # done before an approval pause: its recorded result, not a second run
            return _REPLAYED, replayed[0]
    reserved = node.admit_tool(name, arguments, cost) if node is not None else {}
    span = None
    try:
        call_id = kwargs.get("tool_call_id") or (node.take_call_id(name, arguments) if node is not None else None)
        span = settings.telemetry.start_tool(name, call_id, arguments, settings.capture_content,
                                             description=_description(fn))
    except Exception:  # noqa: BLE001
        span = None
    return node, name, reserved, span, cost, arguments, kwargs.get("tool_call_id")


def _description(fn: Callable[..., Any]) -> str | None:
    """A tool's description: its docstring's first paragraph."""
    doc = inspect.getdoc(fn)
    return doc.split("\n\n", 1)[0].strip() or None if doc else None


def _after(state: tuple, result: Any, error: BaseException | None) -> None:
    node, name, reserved, span, cost, *arguments = state
    if node is not None:
        node.settle_tool(name, reserved)
        if error is None and arguments and node.approval is not None:
            node.approval.record(name, arguments[0], result)
        if error is None:
            try:
                node.note_tool_result(name, arguments[1] if len(arguments) > 1 else None, result)
            except Exception:  # noqa: BLE001 - our bug must not break the agent
                pass
    if span is not None:
        try:
            config.get().telemetry.end_tool(span, result, error, config.get().capture_content, cost)
        except Exception:  # noqa: BLE001
            pass


def begin_tool(name: str, arguments: Any, call_id: str | None = None, cost_usd: float = 0.0,
               description: str | None = None) -> tuple:
    """For framework adapters: check a tool execution in the current run (raises BudgetExceeded) and span it.

    Pass the result to `end_tool` exactly once. A tool call the model requested is counted once, not again here.
    """
    cost_usd = check_cost(cost_usd, f"the cost_usd of tool {name}")
    node = current_run()
    settings = config.get()
    reserved = node.admit_tool(name, arguments, cost_usd) if node is not None else {}
    span = None
    try:
        span = settings.telemetry.start_tool(name, call_id, arguments, settings.capture_content,
                                             description=description)
    except Exception:  # noqa: BLE001
        span = None
    return node, name, reserved, span, cost_usd, arguments, call_id


def end_tool(state: tuple, result: Any, error: BaseException | None = None) -> None:
    """Settle and close what `begin_tool` opened."""
    _after(state, result, error)
