"""LangChain tools (`BaseTool.run` / `arun`, which `ToolNode` uses) get `execute_tool` spans; the tool call the model
requested was already counted, so running it is not counted again. A refused tool execution is not run and answers
with an error `ToolMessage`; a tool stopped by `interrupt()` is not counted until it runs again on resume."""

from __future__ import annotations

import contextlib
from typing import Any

from opentelemetry import trace

from ...core import config
from ...core.resume import pause
from ...core.tools import begin_tool, end_tool
from ...model.outcome import BudgetExceeded
from .langchain_pauses import is_bubble_up, is_interrupt


def _begin(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    """Check and reserve the tool call (BudgetExceeded when the budget refuses it) and open its span."""
    tool_input = args[0] if args else kwargs.get("tool_input")
    return begin_tool(str(instance.name), tool_input, kwargs.get("tool_call_id"),
                      description=_tool_description(instance))


def _in_span(state: tuple) -> Any:
    span = state[3]
    return trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext()


def _failed(state: tuple, exc: BaseException, call_id: str | None) -> None:
    if not _interrupted(state, exc, call_id):
        end_tool(state, None, exc)


def _refused(instance: Any, exc: BudgetExceeded, call_id: str | None) -> Any:
    if call_id is None:
        raise exc
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=f"Not run: {exc.message}", tool_call_id=call_id, name=instance.name, status="error")


def _interrupted(state: tuple, exc: BaseException, call_id: str | None) -> bool:
    """A tool stopped by `interrupt()` (it runs again on resume): not counted now; the run pauses on it."""
    if not is_bubble_up(exc):
        return False
    node, name, reserved, span, cost, arguments, *_ = state
    if node is not None:
        node.release_tool(name, reserved)
        if is_interrupt(exc) and (node.stop_state is None or node.approval is None or node.approval.pending is None):
            pause(name, arguments, call_id, node=node)
    if span is not None:
        try:
            config.get().telemetry.end_tool(span, None, None, False, 0.0)
        except Exception:  # noqa: BLE001
            pass
    return True


def _tool_description(tool: Any) -> str | None:
    description = getattr(tool, "description", None)
    return description if isinstance(description, str) and description else None


def tool_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call_id = kwargs.get("tool_call_id")
    try:
        state = _begin(instance, args, kwargs)
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    try:
        with _in_span(state):
            result = wrapped(*args, **kwargs)
    except BaseException as exc:
        _failed(state, exc, call_id)
        raise
    end_tool(state, getattr(result, "content", result))
    return result


async def tool_arun(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call_id = kwargs.get("tool_call_id")
    try:
        state = _begin(instance, args, kwargs)
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    try:
        with _in_span(state):
            result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _failed(state, exc, call_id)
        raise
    end_tool(state, getattr(result, "content", result))
    return result

