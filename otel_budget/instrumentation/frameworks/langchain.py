"""LangGraph / LangChain: every graph `invoke`, `ainvoke`, `stream` and `astream` is a budgeted run.

- The run is named after the graph (`graph.name`, "LangGraph" unless set). Its budget is
  `config["configurable"]["otel_budget"]` when the call brings one, else that of the graph's
  `otel_budget.langchain.BudgetMiddleware` (a LangChain v1 `create_agent` agent), else the default given to
  `instrument()`.
- A graph invoked while a run is active (a subgraph node, or a graph called from a tool) is a child run that
  draws from its parents: the tree is shared and `Budget.max_depth` bounds the nesting.
- A `GraphRecursionError` after the run has stopped is not raised: the graph returns with the wrap-up message last.
- Chat models, and LangChain's own limit middleware: `langchain_models`. Tools: `langchain_tools`. `interrupt()`,
  `Command(resume=...)`, the usage kept per thread for resumes and limit pauses: `langchain_pauses`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from ...core.resume import resume
from ...core.run import Run, current_run
from ...model.budget import Budget, Usage
from ...model.paused import PausedRun
from .._spec import AdapterSpec, PatchPoint, points
from ._framework import budget_from
from .langchain_models import (
    AGENT_POINTS,
    agenerate,
    generate,
    graph_runs,
    stop_message,
)
from .langchain_pauses import (
    carried,
    decision,
    forget_thread,
    interrupt_at_limit,
    is_bubble_up,
    is_interrupt,
    keep,
    on_interrupt,
    paused_run,
)
from .langchain_tools import tool_arun, tool_run

log = logging.getLogger(__name__)

#: Graph builder -> the budget of its `BudgetMiddleware` (None: it has none).
_middleware_budgets: weakref.WeakKeyDictionary[Any, Budget | None] = weakref.WeakKeyDictionary()


# --- graph runs ------------------------------------------------------------------------------------------


class _GraphCall:
    """What a graph call brings: its run name, budget, thread and whether it resumes."""

    def __init__(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        graph_input = args[0] if args else kwargs.get("input")
        config = args[1] if len(args) > 1 else kwargs.get("config")
        configurable = (config or {}).get("configurable") or {} if isinstance(config, dict) else {}
        self.name = str(getattr(instance, "name", None) or "LangGraph")
        self.budget: Budget | None = budget_from(configurable) or _middleware_budget(instance)
        thread = configurable.get("thread_id")
        self.thread = str(thread) if thread is not None else None
        self.resume_value = getattr(graph_input, "resume", None)
        self.resumes = graph_input is None or self.resume_value is not None
        self.carried: Usage | PausedRun | None = None
        if current_run() is None and self.thread is not None and self.resumes:
            self.carried = carried(self.name, self.thread, instance, config)

    def make_run(self) -> Run:
        """A fresh run, or the paused run of this thread going on (`Command(resume=...)` after `interrupt()`)."""
        if isinstance(self.carried, PausedRun):
            paused = self.carried
            return resume(paused, approved=decision(self.resume_value, paused), budget=self.budget)
        return Run(self.name, self.budget, conversation_id=self.thread)

    def start(self, run: Run) -> None:
        node = run.node
        graph_runs.add(node)
        if node.parent is None and isinstance(self.carried, Usage):
            node.carry_over(self.carried)

    def end(self, run: Run) -> None:
        outcome = run.node.outcome
        if outcome is None or run.node.parent is not None or self.thread is None:
            return
        keep(self.name, self.thread, outcome.paused if outcome.paused is not None else outcome.usage)


def _middleware_budget(graph: Any) -> Budget | None:
    """The budget of a `BudgetMiddleware` in a `create_agent` graph (found once per graph builder), else None."""
    builder = getattr(graph, "builder", None)
    nodes = getattr(builder, "nodes", None)
    if not isinstance(nodes, dict):
        return None
    try:
        return _middleware_budgets[builder]
    except (KeyError, TypeError):
        pass
    found: Budget | None = None
    for spec in nodes.values():
        runnable = getattr(spec, "runnable", None)
        hook = getattr(runnable, "func", None) or getattr(runnable, "afunc", None)
        owner = getattr(hook, "__self__", None)
        if owner is not None and type(owner).__name__ == "BudgetMiddleware":
            found = budget_from(owner)
            break
    with contextlib.suppress(TypeError):  # a builder that takes no weak reference is searched on every call
        _middleware_budgets[builder] = found
    return found


def _after_stop(run: Run, exc: BaseException | None) -> BaseException | None:
    """The exception to give the run's exit: a recursion error after a budget stop is part of the stop, and an
    interrupt (or a command to the parent graph) that leaves a subgraph is a pause, not an error."""
    if exc is not None and type(exc).__name__ == "GraphRecursionError" and run.node.stop_state is not None:
        return None
    if exc is not None and is_bubble_up(exc):
        if is_interrupt(exc):
            on_interrupt(run.node, exc)
        return None
    return exc


def _raised(exc_in: BaseException | None, error: BaseException | None, suppressed: bool) -> BaseException | None:
    """What the graph call raises after the run closed: the error, unless the run took it as its own stop."""
    if error is not None and exc_in is None and is_bubble_up(error):
        return error  # LangGraph's own control flow goes on to the parent graph
    return exc_in if exc_in is not None and not suppressed else None


def _stream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _run_stream(_GraphCall(instance, args, kwargs), lambda: wrapped(*args, **kwargs))


def _run_stream(call: _GraphCall, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    # The run lives in its own copy of the context, entered only while the graph advances: code the caller
    # runs between two chunks is not inside the run, and the run closes cleanly whoever closes the generator.
    ctx = contextvars.copy_context()
    run = call.make_run()
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
    exc_in = ctx.run(_after_stop, run, error)
    suppressed = ctx.run(run.__exit__, type(exc_in) if exc_in else None, exc_in, None)
    call.end(run)
    to_raise = _raised(exc_in, error, suppressed)
    if to_raise is not None:
        raise to_raise


def _astream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _run_astream(_GraphCall(instance, args, kwargs), lambda: wrapped(*args, **kwargs))


async def _run_astream(call: _GraphCall, make: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[Any]:
    run = call.make_run()
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
    to_raise = _raised(exc_in, error, suppressed)
    if to_raise is not None:
        raise to_raise


def _loop_exit(original: Callable[..., Any]) -> Callable[..., Any] | None:
    """LangGraph's loop ends (`_suppress_interrupt`): a top graph stopped at an interrupt pauses its run. A plain
    function, not a wrapt proxy: the loop pushes it on an ExitStack, which would take a proxy for a context
    manager. None (left as it is) when `original` is not LangGraph's own function but someone's wrapper."""
    if getattr(original, "__name__", "") != "_suppress_interrupt" or hasattr(original, "__wrapped__"):
        return None

    def _suppress_interrupt(self: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
        result = original(self, exc_type, exc_value, traceback)
        _on_loop_exit(self, exc_value)
        return result

    _suppress_interrupt.__wrapped__ = original  # type: ignore[attr-defined]
    return _suppress_interrupt


def _on_loop_exit(loop: Any, exc: BaseException | None) -> None:
    try:
        node = current_run()
        top = not getattr(loop, "is_nested", True)
        if exc is not None and is_interrupt(exc) and top and node is not None and node in graph_runs:
            on_interrupt(node, exc)
    except Exception:  # noqa: BLE001 - our bug must not break the graph
        log.warning("otel-budget: recording an interrupt failed", exc_info=True)



SPEC = AdapterSpec(
    requires=("langchain-core >= 0.3, < 2", "langgraph >= 0.3, < 2"),  # LangGraph's points: only where installed
    patches=(
        *points("langchain_core.language_models.chat_models", {"BaseChatModel._generate_with_cache": generate,
                                                               "BaseChatModel._agenerate_with_cache": agenerate}),
        *points("langchain_core.tools", {"BaseTool.run": tool_run, "BaseTool.arun": tool_arun}),
        *AGENT_POINTS,
        *points("langgraph.pregel", {"Pregel.stream": _stream, "Pregel.astream": _astream}),
        PatchPoint("langgraph.pregel._loop", "PregelLoop._suppress_interrupt", _loop_exit, replace=True,
                   lost="an interrupt() ends a run as done"),
    ),
)


__all__ = ["forget_thread", "interrupt_at_limit", "paused_run", "stop_message"]
