"""LangChain chat models in a graph run: a refused call is answered by the wrap-up, an answer cut at the budget's
output limit is replaced by it, a structured `response_format` ends with it, and LangChain's own limit middleware
ends the run at its limit.

- Chat models are charged by the provider patches underneath (langchain-openai uses the openai SDK,
  langchain-anthropic the anthropic SDK), never through LangChain callbacks, so no call counts twice.
- A stop: inside a graph run, a chat model call the budget refuses is answered, without being sent, by an
  `AIMessage` carrying the wrap-up (no tool calls), so a tool-calling graph routes to its end and the graph
  returns normally with that message last. `response_metadata["otel_budget"]` holds the stop reason and limit.
- An answer cut at the output limit the budget set (a token or cost cap, no `max_tokens` on the model) stops the
  run with that limit (`tokens` / `cost`): the graph gets the wrap-up message instead of the cut text (with the
  call's `usage_metadata` and the same `otel_budget` metadata), so the cut text is never presented as the answer.
  Outside a graph run (a chat model called in a plain `run()`) the cut answer is returned as it came.
- LangChain's own `ModelCallLimitMiddleware` / `ToolCallLimitMiddleware` (`exit_behavior="end"`) keep working; an
  agent they end (built after `instrument()`) has stopped at a limit: the run ends `steps` / `tool_calls` with
  `outcome.limit` `run_limit` or `thread_limit`, not `done`."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ...core.run import RunNode, current_run
from ...model.budget import StopReason
from ...model.outcome import BudgetExceeded
from .._spec import PatchPoint, points
from ._framework import cut_stop, own_stop, stop_text
from .langchain_pauses import interrupt_at_limit

log = logging.getLogger(__name__)

#: Runs opened by a graph call: only there is a refused model call answered by a wrap-up message.
graph_runs: weakref.WeakSet[RunNode] = weakref.WeakSet()


# --- chat models: a refused call is answered by the wrap-up --------------------------------------------------


def _graph_node() -> RunNode | None:
    node = current_run()
    return node if node is not None and node in graph_runs else None


def _stopped_graph_node(exc: BudgetExceeded) -> RunNode | None:
    """The graph run whose own (or an ancestor's) stop `exc` is, else None."""
    return own_stop(_graph_node(), exc)


def stop_message(node: RunNode, exc: BudgetExceeded, cut: Any = None) -> Any:
    """The wrap-up as the model's answer; for an answer the budget cut short, with that call's usage and metadata."""
    from langchain_core.messages import AIMessage

    meta = {"otel_budget": {"stop_reason": exc.reason.value, "limit": exc.limit, "run_name": node.name}}
    if cut is None:
        return AIMessage(content=stop_text(node, exc), response_metadata=meta)
    return AIMessage(content=stop_text(node, exc), id=cut.id, usage_metadata=getattr(cut, "usage_metadata", None),
                     response_metadata={**(cut.response_metadata or {}), **meta})


def _stop_result(node: RunNode, exc: BudgetExceeded) -> Any:
    from langchain_core.outputs import ChatGeneration, ChatResult

    return ChatResult(generations=[ChatGeneration(message=stop_message(node, exc))])


def _cut_short(node: RunNode | None, was_cut: bool, result: Any) -> Any:
    """A graph run whose answer was just cut at the output limit the budget set: the graph gets the wrap-up, not the
    cut text, as the model's answer."""
    try:
        stop = cut_stop(node, was_cut)
        if node is None or stop is None or len(result.generations) != 1:
            return result
        from langchain_core.outputs import ChatGeneration, ChatResult

        message = stop_message(node, stop, cut=result.generations[0].message)
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output=result.llm_output)
    except Exception:  # noqa: BLE001 - our bug must not break the graph
        log.warning("otel-budget: could not replace a cut answer by the wrap-up", exc_info=True)
        return result


def _answer(node: RunNode | None, was_cut: bool, exc: Exception) -> Any:
    """The wrap-up answering a call of a graph run that failed on a stop, or None (the error is not ours): the
    budget refused the call (a limit pause with a checkpointer interrupts instead), or the answer was cut at the
    budget's output limit (openai's `parse()` raises `LengthFinishReasonError`, as a structured `response_format`
    uses it)."""
    stop: BudgetExceeded | None
    if isinstance(exc, BudgetExceeded):
        node, stop = _stopped_graph_node(exc), exc
        if node is not None:
            interrupt_at_limit(node, exc)
    else:
        stop = cut_stop(node, was_cut)
    return None if node is None or stop is None else _stop_result(node, stop)


def generate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    node = _graph_node()
    was_cut = node is not None and node.truncated_by_budget
    try:
        result = wrapped(*args, **kwargs)
    except Exception as exc:
        answer = _answer(node, was_cut, exc)
        if answer is None:
            raise
        return answer
    return _cut_short(node, was_cut, result)


async def agenerate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    node = _graph_node()
    was_cut = node is not None and node.truncated_by_budget
    try:
        result = await wrapped(*args, **kwargs)
    except Exception as exc:
        answer = _answer(node, was_cut, exc)
        if answer is None:
            raise
        return answer
    return _cut_short(node, was_cut, result)


# --- LangChain's own limits: an agent they end has stopped at a limit, not finished -------------------------

#: LangChain v1 limit middleware -> the stop reason of a run it ends (`exit_behavior="end"`).
_LIMIT_MIDDLEWARE = {"ModelCallLimitMiddleware": StopReason.STEPS, "ToolCallLimitMiddleware": StopReason.TOOL_CALLS}


def _note_limit(instance: Any, result: Any) -> None:
    """A LangChain limit middleware jumped to the end: the graph run ends with its limit (`steps` / `tool_calls`)."""
    try:
        if not isinstance(result, dict) or result.get("jump_to") != "end":
            return
        node = _graph_node()
        reason = _LIMIT_MIDDLEWARE.get(type(instance).__name__)
        if node is None or reason is None or node.stop_state is not None:
            return
        messages = result.get("messages") or []
        text = str(getattr(messages[-1], "content", "") if messages else "")
        limit = "thread_limit" if "thread limit" in text and "run limit" not in text else "run_limit"
        node.stop_state = (reason, limit, f"LangChain's {type(instance).__name__} ended the agent: {text}")
    except Exception:  # noqa: BLE001 - our bug must not break the agent
        log.warning("otel-budget: recording a LangChain limit failed", exc_info=True)


def _limit_hook(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    _note_limit(instance, result)
    return result


async def _alimit_hook(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = await wrapped(*args, **kwargs)
    _note_limit(instance, result)
    return result


def _provider_parse(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A structured `response_format` parsed from the answer's text: the wrap-up that answers a stop is no structured
    answer, so the agent ends with it (`structured_response` None) instead of failing to parse it."""
    message = args[0] if args else kwargs.get("response")
    if "otel_budget" in (getattr(message, "response_metadata", None) or {}):
        return None
    return wrapped(*args, **kwargs)


#: LangChain v1 agents (`create_agent`), where installed: its limit middleware and structured output.
AGENT_POINTS = (
    PatchPoint("langchain.agents.structured_output", "ProviderStrategyBinding.parse", _provider_parse, optional=True),
    *points("langchain.agents.middleware", {
        "ModelCallLimitMiddleware.before_model": _limit_hook, "ModelCallLimitMiddleware.abefore_model": _alimit_hook,
        "ToolCallLimitMiddleware.after_model": _limit_hook, "ToolCallLimitMiddleware.aafter_model": _alimit_hook,
    }, optional=True),
)


__all__ = ["stop_message"]
