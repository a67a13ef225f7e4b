"""LangGraph's `interrupt()` and `Command(resume=...)`: the pause a run takes at an interrupt (an approval or a limit
pause), the decision a resume value carries, and the usage kept per thread for resumes.

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
  the wrap-up message, and `otel_budget.resume(paused_run(thread), ...)` around a new call goes on."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from typing import Any

from ...core.resume import pause
from ...core.run import RunNode
from ...model.budget import StopReason, Usage
from ...model.outcome import BudgetExceeded
from ...model.paused import PausedRun
from ...model.signatures import canonical_arguments
from ._framework import limit_pause, limit_value

log = logging.getLogger(__name__)

#: (graph name, thread_id) -> usage of the thread's last top-level run (or its pause), for resumes. Bounded.
_carried: OrderedDict[tuple[str, str], Usage | PausedRun] = OrderedDict()
_carried_lock = threading.Lock()
_CARRIED_MAX = 10_000


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


def carried(name: str, thread: str, graph: Any, config: Any) -> Usage | PausedRun | None:
    """What a call resuming the thread starts from: the usage (or pause) of its last top-level run in this process,
    else the limit pause the thread's checkpoint holds (e.g. a resume in another process)."""
    with _carried_lock:
        kept = _carried.get((name, thread))
    return kept if kept is not None else _checkpointed_pause(graph, config)


def keep(name: str, thread: str, kept: Usage | PausedRun) -> None:
    """Keep the usage (or pause) of a thread's top-level run for its resumes; the longest unused thread goes first."""
    with _carried_lock:
        _carried[(name, thread)] = kept
        _carried.move_to_end((name, thread))
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


# --- interrupt(): a pause, and Command(resume=...) the decision ------------------------------------------------

_APPROVE = frozenset({"approve", "approved", "accept", "accepted", "yes", "y", "ok", "allow", "true"})
_REJECT = frozenset({"reject", "rejected", "deny", "denied", "decline", "no", "n", "false"})


def _classes(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def is_bubble_up(exc: BaseException) -> bool:
    return "GraphBubbleUp" in _classes(exc)


def is_interrupt(exc: BaseException) -> bool:
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


def on_interrupt(node: RunNode, exc: BaseException) -> None:
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


def decision(value: Any, paused: PausedRun) -> bool | None:
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
            return decision(decisions[0], paused)
        for key in ("type", "decision", "action"):
            if isinstance(value.get(key), str):
                return decision(value[key], paused)
    return None


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



__all__ = ["forget_thread", "interrupt_at_limit", "paused_run"]
