"""LangGraph / LangChain: every graph `invoke`, `ainvoke`, `stream` and `astream` is a budgeted run.

- The run is named after the graph (`graph.name`, "LangGraph" unless set). Its budget is
  `config["configurable"]["otel_budget"]` when the call brings one, else the default given to `instrument()`.
- A graph invoked while a run is active (a subgraph node, or a graph called from a tool) is a child run that
  draws from its parents: the tree is shared and `Budget.max_depth` bounds the nesting.
- Chat models are charged by the provider patches underneath (langchain-openai uses the openai SDK,
  langchain-anthropic the anthropic SDK), never through LangChain callbacks, so no call counts twice.
- Tools (`BaseTool.run` / `arun`, which `ToolNode` uses) get `execute_tool` spans; the tool call the model
  requested was already counted, so running it is not counted again.
- A stop: inside a graph run, a chat model call the budget refuses is answered, without being sent, by an
  `AIMessage` carrying the wrap-up (no tool calls), so a tool-calling graph routes to its end and the graph
  returns normally with that message last. `response_metadata["otel_budget"]` holds the stop reason and limit.
  A refused tool execution is not run and answers with an error `ToolMessage`. A `GraphRecursionError` after
  the run has stopped is not raised either.
- Resume: the usage of a top-level graph run is kept in this process per (graph name, thread_id). A call that
  resumes the thread (`Command(resume=...)` or input `None`, with a checkpointer) starts with that usage
  already consumed, so an `interrupt()` does not reset the quota. A call with new input starts fresh.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from opentelemetry import trace

from ..budget import Budget, BudgetExceeded, Usage
from ..run import Run, RunNode, current_run
from ..tools import begin_tool, end_tool
from ._framework import budget_from, stop_text
from ._patch import Patches

log = logging.getLogger(__name__)

#: Runs opened by a graph call: only there is a refused model call answered by a wrap-up message.
_graph_runs: weakref.WeakSet[RunNode] = weakref.WeakSet()
#: (graph name, thread_id) -> usage of the thread's last top-level run, for resumes. Bounded, oldest out.
_carried: OrderedDict[tuple[str, str], Usage] = OrderedDict()
_carried_lock = threading.Lock()
_CARRIED_MAX = 10_000


def forget_thread(thread_id: str, graph_name: str | None = None) -> None:
    """Drop the usage kept for a thread's resumes (all graphs, or one graph)."""
    with _carried_lock:
        for key in [k for k in _carried if k[1] == thread_id and graph_name in (None, k[0])]:
            del _carried[key]


# --- graph runs ------------------------------------------------------------------------------------------


class _GraphCall:
    """What a graph call brings: its run name, budget, thread and whether it resumes."""

    def __init__(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        graph_input = args[0] if args else kwargs.get("input")
        config = args[1] if len(args) > 1 else kwargs.get("config")
        configurable = (config or {}).get("configurable") or {} if isinstance(config, dict) else {}
        self.name = str(getattr(instance, "name", None) or "LangGraph")
        self.budget: Budget | None = budget_from(configurable)
        thread = configurable.get("thread_id")
        self.thread = str(thread) if thread is not None else None
        self.resumes = graph_input is None or getattr(graph_input, "resume", None) is not None

    def start(self, run: Run) -> None:
        node = run.node
        _graph_runs.add(node)
        if node.parent is None and self.thread is not None and self.resumes:
            with _carried_lock:
                carried = _carried.get((self.name, self.thread))
            if carried is not None:
                node.carry_over(carried)

    def end(self, run: Run) -> None:
        outcome = run.outcome
        if outcome is None or run.node.parent is not None or self.thread is None:
            return
        with _carried_lock:
            key = (self.name, self.thread)
            _carried[key] = outcome.usage
            _carried.move_to_end(key)
            while len(_carried) > _CARRIED_MAX:
                _carried.popitem(last=False)


def _after_stop(run: Run, exc: BaseException | None) -> BaseException | None:
    """The exception to give the run's exit: a recursion error after a budget stop is part of the stop."""
    if exc is not None and type(exc).__name__ == "GraphRecursionError" and run.node.stop_state is not None:
        return None
    return exc


def _stream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _run_stream(_GraphCall(instance, args, kwargs), lambda: wrapped(*args, **kwargs))


def _run_stream(call: _GraphCall, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    # The run lives in its own copy of the context, entered only while the graph advances: code the caller
    # runs between two chunks is not inside the run, and the run closes cleanly whoever closes the generator.
    ctx = contextvars.copy_context()
    run = Run(call.name, call.budget)
    ctx.run(run.__enter__)
    call.start(run)
    error: BaseException | None = None
    try:
        chunks = ctx.run(make)
        try:
            while True:
                try:
                    chunk = ctx.run(next, chunks)
                except StopIteration:
                    break
                yield chunk
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                ctx.run(close)
    except BaseException as exc:
        error = exc
    exc_in = _after_stop(run, error)
    suppressed = ctx.run(run.__exit__, type(exc_in) if exc_in else None, exc_in, None)
    call.end(run)
    if exc_in is not None and not suppressed:
        raise exc_in


def _astream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _run_astream(_GraphCall(instance, args, kwargs), lambda: wrapped(*args, **kwargs))


async def _run_astream(call: _GraphCall, make: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[Any]:
    run = Run(call.name, call.budget)
    await run.__aenter__()
    call.start(run)
    error: BaseException | None = None
    try:
        chunks = make()
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
    except BaseException as exc:
        error = exc
    exc_in = _after_stop(run, error)
    suppressed = await run.__aexit__(type(exc_in) if exc_in else None, exc_in, None)
    call.end(run)
    if exc_in is not None and not suppressed:
        raise exc_in


# --- chat models: a refused call is answered by the wrap-up --------------------------------------------------


def _stopped_graph_node(exc: BudgetExceeded) -> RunNode | None:
    node = current_run()
    if node is None or node not in _graph_runs or node.id not in getattr(exc, "run_path", ()):
        return None
    return node


def _stop_result(node: RunNode, exc: BudgetExceeded) -> Any:
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    meta = {"otel_budget": {"stop_reason": exc.reason.value, "limit": exc.limit, "run_name": node.name}}
    message = AIMessage(content=stop_text(node, exc), response_metadata=meta)
    return ChatResult(generations=[ChatGeneration(message=message)])


def _generate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    except BudgetExceeded as exc:
        node = _stopped_graph_node(exc)
        if node is None:
            raise
        return _stop_result(node, exc)


async def _agenerate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    except BudgetExceeded as exc:
        node = _stopped_graph_node(exc)
        if node is None:
            raise
        return _stop_result(node, exc)


# --- tools -----------------------------------------------------------------------------------------------


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str | None]:
    tool_input = args[0] if args else kwargs.get("tool_input")
    return tool_input, kwargs.get("tool_call_id")


def _refused(instance: Any, exc: BudgetExceeded, call_id: str | None) -> Any:
    if call_id is None:
        raise exc
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=f"Not run: {exc.message}", tool_call_id=call_id, name=instance.name, status="error")


def _tool_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool_input, call_id = _tool_args(args, kwargs)
    try:
        state = begin_tool(str(instance.name), tool_input, call_id)
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = wrapped(*args, **kwargs)
    except BaseException as exc:
        end_tool(state, None, exc)
        raise
    end_tool(state, getattr(result, "content", result))
    return result


async def _tool_arun(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool_input, call_id = _tool_args(args, kwargs)
    try:
        state = begin_tool(str(instance.name), tool_input, call_id)
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        end_tool(state, None, exc)
        raise
    end_tool(state, getattr(result, "content", result))
    return result


def instrument(patches: Patches) -> bool:
    """Patch the installed LangChain core (chat models, tools) and LangGraph (graph runs)."""
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.tools import BaseTool
    except ImportError:
        return False
    patches.wrap(BaseChatModel, "_generate_with_cache", _generate)
    patches.wrap(BaseChatModel, "_agenerate_with_cache", _agenerate)
    patches.wrap(BaseTool, "run", _tool_run)
    patches.wrap(BaseTool, "arun", _tool_arun)
    try:
        from langgraph.pregel import Pregel
    except ImportError:
        return True
    patches.wrap(Pregel, "stream", _stream)
    patches.wrap(Pregel, "astream", _astream)
    return True


__all__ = ["forget_thread"]
