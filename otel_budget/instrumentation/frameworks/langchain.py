"""LangGraph / LangChain: every graph `invoke`, `ainvoke`, `stream` and `astream` is a budgeted run.

- The run is named after the graph (`graph.name`, "LangGraph" unless set). Its budget is
  `config["configurable"]["otel_budget"]` when the call brings one, else that of the graph's
  `otel_budget.langchain.BudgetMiddleware` (a LangChain v1 `create_agent` agent), else the default given to
  `instrument()`.
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
- An answer cut at the output limit the budget set (a token or cost cap, no `max_tokens` on the model) stops the
  run with that limit (`tokens` / `cost`): the graph gets the wrap-up message instead of the cut text (with the
  call's `usage_metadata` and the same `otel_budget` metadata), so the cut text is never presented as the answer.
  Outside a graph run (a chat model called in a plain `run()`) the cut answer is returned as it came.
- LangChain's own `ModelCallLimitMiddleware` / `ToolCallLimitMiddleware` (`exit_behavior="end"`) keep working; an
  agent they end (built after `instrument()`) has stopped at a limit: the run ends `steps` / `tool_calls` with
  `outcome.limit` `run_limit` or `thread_limit`, not `done`.
- Resume: the usage of a top-level graph run is kept in this process per (graph name, thread_id). A call that
  resumes the thread (`Command(resume=...)` or input `None`, with a checkpointer) starts with that usage
  already consumed, so an `interrupt()` does not reset the quota. A call with new input starts fresh.
- `interrupt()` is a pause: the run ends `awaiting_approval` (not `done`); `paused_run(thread_id)` is its
  `PausedRun`, whose `pending` is the call it waits on (the tool that called `interrupt()`, the gated tool the
  model asked for, or what the interrupt value names: `{"tool": ..., "arguments": ...}`, `{"name": ...,
  "args": ...}`, `action_requests`). A tool stopped by `interrupt()` runs again on resume and counts once.
  `Command(resume=...)` on the thread goes on from that pause (`otel_budget.resume`): same trace, same quota. When the
  call is one our policy (`Budget(approve=[...])`) names, the resume value is the person's decision: `True` /
  `"approve"` / `{"type": "approve"}` grants exactly that call, `False` / `"reject"` / `{"type": "reject"}`
  ends the run `denied` (or goes on with the policy's `alternative`); anything else decides nothing.
- A limit pause (`Budget(on_limit="pause")`) in a graph with a checkpointer is LangGraph's own `interrupt()`: the
  refused model call is not sent, the node interrupts with the limit as the value (`{"kind": "limit", "limit",
  "used", "cap", "run", "detail", "paused": <PausedRun JSON>}`), and `Command(resume=True)` on the thread goes on
  under the budget that call brings (`config["configurable"]["otel_budget"]`, else the saved one), with the quota
  used counted, so it never passes the new limits; `Command(resume=False)` ends the run with the limit's own stop
  reason and the wrap-up as the last message. The pause travels in the checkpoint: a resume in another process
  reads it there (a checkpointer that can be read synchronously). Without a checkpointer the graph returns with
  the wrap-up message, and `otel_budget.resume(paused_run(thread), ...)` around a new call goes on.
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

from ...core import config
from ...core.resume import pause, resume
from ...core.run import Run, RunNode, current_run
from ...core.tools import begin_tool, end_tool
from ...model.budget import Budget, StopReason, Usage
from ...model.outcome import BudgetExceeded
from ...model.paused import PausedRun
from ...model.signatures import canonical_arguments
from .._patch import Patches
from ._framework import budget_from, limit_pause, limit_value, stop_text

log = logging.getLogger(__name__)

#: Runs opened by a graph call: only there is a refused model call answered by a wrap-up message.
_graph_runs: weakref.WeakSet[RunNode] = weakref.WeakSet()
#: (graph name, thread_id) -> usage of the thread's last top-level run (or its pause), for resumes. Bounded.
_carried: OrderedDict[tuple[str, str], Usage | PausedRun] = OrderedDict()
_carried_lock = threading.Lock()
_CARRIED_MAX = 10_000
#: Graph builder -> the budget of its `BudgetMiddleware` (None: it has none).
_middleware_budgets: weakref.WeakKeyDictionary[Any, Budget | None] = weakref.WeakKeyDictionary()


def paused_run(thread_id: str, graph_name: str | None = None) -> PausedRun | None:
    """The pause of a thread's last top-level run (after an `interrupt()`), or None when it did not pause."""
    with _carried_lock:
        for (name, thread), kept in reversed(_carried.items()):
            if thread == thread_id and graph_name in (None, name):
                return kept if isinstance(kept, PausedRun) else None
    return None


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
        self.budget: Budget | None = budget_from(configurable) or _middleware_budget(instance)
        thread = configurable.get("thread_id")
        self.thread = str(thread) if thread is not None else None
        self.resume_value = getattr(graph_input, "resume", None)
        self.resumes = graph_input is None or self.resume_value is not None
        self.carried: Usage | PausedRun | None = None
        if current_run() is None and self.thread is not None and self.resumes:
            with _carried_lock:
                self.carried = _carried.get((self.name, self.thread))
            if self.carried is None:  # e.g. another process: the checkpoint may hold a limit pause
                self.carried = _checkpointed_pause(instance, config)

    def make_run(self) -> Run:
        """A fresh run, or the paused run of this thread going on (`Command(resume=...)` after `interrupt()`)."""
        if isinstance(self.carried, PausedRun):
            paused = self.carried
            return resume(paused, approved=_decision(self.resume_value, paused), budget=self.budget)
        return Run(self.name, self.budget, conversation_id=self.thread)

    def start(self, run: Run) -> None:
        node = run.node
        _graph_runs.add(node)
        if node.parent is None and isinstance(self.carried, Usage):
            node.carry_over(self.carried)

    def end(self, run: Run) -> None:
        outcome = run.node.outcome
        if outcome is None or run.node.parent is not None or self.thread is None:
            return
        with _carried_lock:
            key = (self.name, self.thread)
            _carried[key] = outcome.paused if outcome.paused is not None else outcome.usage
            _carried.move_to_end(key)
            while len(_carried) > _CARRIED_MAX:
                _carried.popitem(last=False)


def _checkpointed_pause(graph: Any, config: Any) -> PausedRun | None:
    """The limit pause a thread's checkpoint holds in its `interrupt()` value (`interrupt_at_limit`), so a
    `Command(resume=...)` in another process goes on with the quota used. None when there is none or the graph's
    checkpointer cannot be read synchronously."""
    if getattr(graph, "checkpointer", None) is None or not isinstance(config, dict):
        return None
    try:
        interrupts = graph.get_state(config).interrupts
        for item in interrupts:
            value = getattr(item, "value", None)
            if isinstance(value, dict) and value.get("kind") == "limit" and isinstance(value.get("paused"), dict):
                return PausedRun.model_validate(value["paused"])
    except Exception:  # noqa: BLE001 - the call starts as a fresh run; say so
        log.warning("otel-budget: could not read a limit pause from the thread's checkpoint", exc_info=True)
    return None


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
    if exc is not None and _is_bubble_up(exc):
        if _is_interrupt(exc):
            _on_interrupt(run.node, exc)
        return None
    return exc


def _raised(exc_in: BaseException | None, error: BaseException | None, suppressed: bool) -> BaseException | None:
    """What the graph call raises after the run closed: the error, unless the run took it as its own stop."""
    if error is not None and exc_in is None and _is_bubble_up(error):
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


# --- interrupt(): a pause, and Command(resume=...) the decision ------------------------------------------------

_APPROVE = frozenset({"approve", "approved", "accept", "accepted", "yes", "y", "ok", "allow", "true"})
_REJECT = frozenset({"reject", "rejected", "deny", "denied", "decline", "no", "n", "false"})


def _classes(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _is_bubble_up(exc: BaseException) -> bool:
    return "GraphBubbleUp" in _classes(exc)


def _is_interrupt(exc: BaseException) -> bool:
    return "GraphInterrupt" in _classes(exc)


def _interrupts(exc: BaseException) -> list[Any]:
    value = exc.args[0] if exc.args else ()
    return list(value) if isinstance(value, (list, tuple)) else []


def _named_call(value: Any) -> tuple[str, Any] | None:
    """(tool, arguments) when an interrupt value names a tool call."""
    if not isinstance(value, dict):
        return None
    requests = value.get("action_requests")
    if isinstance(requests, list) and requests:
        return _named_call(requests[0])
    for inner in ("tool_call", "action_request", "action"):
        if isinstance(value.get(inner), dict):
            return _named_call(value[inner])
    name = value.get("tool") or value.get("name") or value.get("action")
    if not isinstance(name, str) or not name:
        return None
    arguments: Any = next((value[k] for k in ("arguments", "args", "input") if k in value), {})
    return name, arguments


def _on_interrupt(node: RunNode, exc: BaseException) -> None:
    """The graph stopped at `interrupt()`: the run pauses on the call it waits for."""
    interrupts = _interrupts(exc)
    state = {"interrupts": [{"id": getattr(i, "id", None), "value": getattr(i, "value", None)} for i in interrupts]}
    pending = node.approval.pending if node.approval is not None else None
    waiting = node.stop_state is not None and node.stop_state[0] is StopReason.AWAITING_APPROVAL
    named = next((c for c in (_named_call(getattr(i, "value", None)) for i in interrupts) if c is not None), None)
    if waiting and pending is not None and (named is None or (
        named[0] == pending.tool and canonical_arguments(named[1]) == canonical_arguments(pending.arguments)
    )):
        node.saved_state = state  # already paused on this call (the model's request, or the tool that asked)
        return
    first = interrupts[0] if interrupts else None
    tool, arguments = named if named is not None else ("interrupt", getattr(first, "value", None))
    pause(tool, arguments, getattr(first, "id", None), state=state, node=node)


def _decision(value: Any, paused: PausedRun) -> bool | None:
    """A `Command(resume=value)` read as a decision on the pending call (None: it decides nothing)."""
    state = paused.state if isinstance(paused.state, dict) else {}
    ids = {i.get("id") for i in state.get("interrupts", ()) if isinstance(i, dict)}
    if isinstance(value, dict) and ids & set(value):
        value = value[next(k for k in value if k in ids)]  # {interrupt id: value}
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        return True if word in _APPROVE else False if word in _REJECT else None
    if isinstance(value, dict):
        if isinstance(value.get("approved"), bool):
            return bool(value["approved"])
        decisions = value.get("decisions")
        if isinstance(decisions, list) and decisions:
            return _decision(decisions[0], paused)
        for key in ("type", "decision", "action"):
            if isinstance(value.get(key), str):
                return _decision(value[key], paused)
    return None


def _loop_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    """LangGraph's loop ends (`_suppress_interrupt`): a top graph stopped at an interrupt pauses its run. A plain
    function, not a wrapt proxy: the loop pushes it on an ExitStack, which would take a proxy for a context
    manager."""

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
        if exc is not None and _is_interrupt(exc) and top and node is not None and node in _graph_runs:
            _on_interrupt(node, exc)
    except Exception:  # noqa: BLE001 - our bug must not break the graph
        log.warning("otel-budget: recording an interrupt failed", exc_info=True)


# --- chat models: a refused call is answered by the wrap-up --------------------------------------------------


def _graph_node() -> RunNode | None:
    node = current_run()
    return node if node is not None and node in _graph_runs else None


def _stopped_graph_node(exc: BudgetExceeded) -> RunNode | None:
    node = _graph_node()
    if node is None or node.id not in getattr(exc, "run_path", ()):
        return None
    return node


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
    """A graph run whose answer was just cut at the output limit the budget set (`RunNode.note_truncation`): the
    run stops there, so the graph gets the wrap-up, not the cut text, as the model's answer."""
    if node is None or was_cut or not node.truncated_by_budget or node.stop_state is None:
        return result
    try:
        generations = result.generations
        if len(generations) != 1:
            return result
        from langchain_core.outputs import ChatGeneration, ChatResult

        stop = node.stop(*node.stop_state)  # the stop note_truncation recorded
        message = stop_message(node, stop, cut=generations[0].message)
        return ChatResult(generations=[ChatGeneration(message=message)], llm_output=result.llm_output)
    except Exception:  # noqa: BLE001 - our bug must not break the graph
        log.warning("otel-budget: could not replace a cut answer by the wrap-up", exc_info=True)
        return result


def _cut_now(node: RunNode | None, was_cut: bool) -> BudgetExceeded | None:
    """The stop, when the call just failed on an answer cut at the output limit the budget set (openai's `parse()`
    raises `LengthFinishReasonError`, as a structured `response_format` uses it): the run stops there all the same."""
    if node is None or was_cut or not node.truncated_by_budget or node.stop_state is None:
        return None
    return node.stop(*node.stop_state)


#: How many earlier resume values of one node a limit pause passes over before it gives up on `interrupt()`.
_RESUMES_MAX = 1000


def interrupt_at_limit(node: RunNode, exc: BudgetExceeded) -> None:
    """A limit pause (`Budget(on_limit="pause")`) in a graph node with a checkpointer is LangGraph's own
    `interrupt()`: this raises `GraphInterrupt` with the limit as its value (kind, limit, used, cap, run, detail,
    and the `PausedRun` JSON as `paused`), and `Command(resume=...)` on the thread is the decision. Returns without
    raising when the graph cannot pause that way (no checkpointer, not in a graph node): the caller then answers
    with the wrap-up."""
    pending = limit_pause(node, exc)
    if pending is None:
        return
    try:
        from langgraph.config import get_config
        from langgraph.types import interrupt

        if not get_config().get("configurable", {}).get("__pregel_checkpointer"):
            return
    except Exception:  # noqa: BLE001 - not inside a graph node (or no langgraph): no interrupt to raise
        return
    value = limit_value(pending, node)
    if node.approval is not None:
        with contextlib.suppress(Exception):  # the pause travels with the checkpoint, for another process
            value["paused"] = node.approval.paused_run(node).model_dump(mode="json")
    for _ in range(_RESUMES_MAX):
        interrupt(value)  # returns only a resume value given to an earlier pause of this node: the call still waits


def _generate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    node = _graph_node()
    was_cut = node is not None and node.truncated_by_budget
    try:
        result = wrapped(*args, **kwargs)
    except BudgetExceeded as exc:
        stopped = _stopped_graph_node(exc)
        if stopped is None:
            raise
        interrupt_at_limit(stopped, exc)
        return _stop_result(stopped, exc)
    except Exception:
        cut = _cut_now(node, was_cut)
        if cut is None:
            raise
        return _stop_result(node, cut)  # type: ignore[arg-type]
    return _cut_short(node, was_cut, result)


async def _agenerate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    node = _graph_node()
    was_cut = node is not None and node.truncated_by_budget
    try:
        result = await wrapped(*args, **kwargs)
    except BudgetExceeded as exc:
        stopped = _stopped_graph_node(exc)
        if stopped is None:
            raise
        interrupt_at_limit(stopped, exc)
        return _stop_result(stopped, exc)
    except Exception:
        cut = _cut_now(node, was_cut)
        if cut is None:
            raise
        return _stop_result(node, cut)  # type: ignore[arg-type]
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


def _patch_limit_middleware(patches: Patches) -> None:
    try:
        from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
    except ImportError:
        return
    for cls, hook in ((ModelCallLimitMiddleware, "before_model"), (ToolCallLimitMiddleware, "after_model")):
        if hook in vars(cls):
            patches.wrap(cls, hook, _limit_hook)
        if f"a{hook}" in vars(cls):
            patches.wrap(cls, f"a{hook}", _alimit_hook)


# --- tools -----------------------------------------------------------------------------------------------


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str | None]:
    tool_input = args[0] if args else kwargs.get("tool_input")
    return tool_input, kwargs.get("tool_call_id")


def _refused(instance: Any, exc: BudgetExceeded, call_id: str | None) -> Any:
    if call_id is None:
        raise exc
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=f"Not run: {exc.message}", tool_call_id=call_id, name=instance.name, status="error")


def _interrupted(state: tuple, exc: BaseException, call_id: str | None) -> bool:
    """A tool stopped by `interrupt()` (it runs again on resume): not counted now; the run pauses on it."""
    if not _is_bubble_up(exc):
        return False
    node, name, reserved, span, cost, arguments, *_ = state
    if node is not None:
        node.release_tool(name, reserved)
        if _is_interrupt(exc) and (node.stop_state is None or node.approval is None or node.approval.pending is None):
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


def _tool_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool_input, call_id = _tool_args(args, kwargs)
    try:
        state = begin_tool(str(instance.name), tool_input, call_id, description=_tool_description(instance))
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = wrapped(*args, **kwargs)
    except BaseException as exc:
        if not _interrupted(state, exc, call_id):
            end_tool(state, None, exc)
        raise
    end_tool(state, getattr(result, "content", result))
    return result


async def _tool_arun(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool_input, call_id = _tool_args(args, kwargs)
    try:
        state = begin_tool(str(instance.name), tool_input, call_id, description=_tool_description(instance))
    except BudgetExceeded as exc:
        return _refused(instance, exc, call_id)
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        if not _interrupted(state, exc, call_id):
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
    _patch_limit_middleware(patches)
    with contextlib.suppress(ImportError):
        from langchain.agents.structured_output import ProviderStrategyBinding

        patches.wrap(ProviderStrategyBinding, "parse", _provider_parse)
    patches.wrap(Pregel, "stream", _stream)
    patches.wrap(Pregel, "astream", _astream)
    try:
        from langgraph.pregel import _loop
    except ImportError:
        _loop = None  # type: ignore[assignment]
    original = vars(getattr(_loop, "PregelLoop", object)).get("_suppress_interrupt")
    if original is None:
        log.warning("otel-budget: this langgraph version lacks a patch point; an interrupt() ends a run as done")
    elif getattr(original, "__name__", "") == "_suppress_interrupt" and not hasattr(original, "__wrapped__"):
        patches.replace(_loop.PregelLoop, "_suppress_interrupt", _loop_exit(original))
    return True


__all__ = ["forget_thread", "paused_run", "stop_message"]
