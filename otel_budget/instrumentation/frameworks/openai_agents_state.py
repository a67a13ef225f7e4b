"""OpenAI Agents SDK: the SDK's interruptions are our pauses (approvals and limit pauses), and the pause travels in
the SDK's `RunState` JSON, so a run resumes with the quota it used, in this process or another."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ...core.resume import ResumedRun, needs_approval, pause
from ...core.run import Run, RunNode, current_run
from ...model.budget import Budget
from ...model.paused import PausedRun, PendingCall
from ...model.signatures import canonical_arguments
from .._spec import PatchPoint, points
from ._framework import BUDGET_KEY

log = logging.getLogger(__name__)

#: Pending tool call id -> the paused run waiting on it (this process), for `Runner.run(agent, state)`.
_paused: OrderedDict[str, PausedRun] = OrderedDict()
_paused_lock = threading.Lock()
_PAUSED_MAX = 10_000
#: Our top-level key in the SDK's `RunState` JSON: the pause (quota used, decisions) travels with the state.
_STATE_KEY = "otel_budget"
#: The tool through which a limit pause (`on_limit="pause"`) becomes one of the SDK's own interruptions: a refused
#: model call is answered by a call to it, which needs approval. The model never sees it (see
#: `openai_agents_models._model_view`).
LIMIT_TOOL = "otel_budget_limit"
LIMIT_CALL_PREFIX = "otel_budget_limit_"
#: Set while the SDK restores a `RunState` paused at a limit: the agent's tools then include LIMIT_TOOL.
_restoring_limit: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_budget_restoring_limit", default=False)


# --- approval: the SDK's interruptions are our pauses ----------------------------------------------------


def field_of(obj: Any, name: str) -> Any:
    """`obj[name]` of a mapping, else the attribute `obj.name` (None when it has none)."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _call_of(item: Any) -> tuple[str, Any, str | None]:
    """(tool name, arguments, call id) of a `ToolApprovalItem`."""
    raw = getattr(item, "raw_item", None)
    name = getattr(item, "tool_name", None) or field_of(raw, "name") or "tool"
    call_id = field_of(raw, "call_id") or field_of(raw, "id")
    return str(name), field_of(raw, "arguments"), str(call_id) if call_id else None


def remember_pause(paused: PausedRun) -> None:
    """Keep a paused run for the `Runner.run(agent, state)` that resumes it (bounded, oldest out)."""
    if paused.pending is None or not paused.pending.call_id:
        return
    with _paused_lock:
        _paused[paused.pending.call_id] = paused
        _paused.move_to_end(paused.pending.call_id)
        while len(_paused) > _PAUSED_MAX:
            _paused.popitem(last=False)


async def load_state(agent: Any, paused: PausedRun | str) -> Any:
    """The SDK `RunState` of a paused run (e.g. in another process, from `outcome(result).paused`); approve or
    reject on it, then `Runner.run(agent, state)` goes on with the quota the run used."""
    from agents.run_state import RunState

    if isinstance(paused, str):
        paused = PausedRun.model_validate_json(paused)
    state = await RunState.from_json(agent, paused.state)
    remember_pause(paused)
    return state


def _our_pauses(run_state: Any) -> tuple[list[Any], list[tuple[PausedRun, str, Any, str | None]]]:
    """A `RunState`'s interruptions, and those a pause of ours (kept in this process) waits on, as
    (pause, tool, arguments, call id)."""
    try:
        items = list(run_state.get_interruptions())
    except Exception:  # noqa: BLE001
        return [], []
    ours = []
    for item in items:
        tool, arguments, call_id = _call_of(item)
        with _paused_lock:
            paused = _paused.get(call_id) if call_id else None
        if paused is not None and paused.pending is not None and (
                paused.pending.tool == tool or (paused.pending.kind == "limit" and tool == LIMIT_TOOL)):
            ours.append((paused, tool, arguments, call_id))
    return items, ours


def _paused_for(run_state: Any) -> PausedRun | None:
    """The pause (kept in this process) that a `RunState`'s interruptions wait on, if any."""
    ours = _our_pauses(run_state)[1]
    return ours[0][0] if ours else None


def _state_to_json(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`RunState.to_json()`: a Budget in a mapping context becomes its JSON fields (so `to_string()` works), and
    a state paused by us carries the pause, so `RunState.from_string` in another process keeps the quota."""
    data = wrapped(*args, **kwargs)
    try:
        entry = data.get("context") if isinstance(data, dict) else None
        context = entry.get("context") if isinstance(entry, dict) else None
        if isinstance(context, dict) and isinstance(context.get(BUDGET_KEY), Budget):
            context[BUDGET_KEY] = context[BUDGET_KEY].model_dump(mode="json", exclude_defaults=True)
        paused = _paused_for(instance)
        if paused is not None:
            data[_STATE_KEY] = {"paused": paused.model_dump(mode="json", exclude={"state"})}
    except Exception:  # noqa: BLE001 - our bug must not break the SDK's serialization
        log.warning("otel-budget: could not add the budget to a serialized RunState", exc_info=True)
    return data


async def _state_from_json(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`RunState.from_json()` / `from_string()`: a pause carried in the JSON is kept for the resuming run."""
    state_json = args[1] if len(args) > 1 else kwargs.get("state_json")
    ours = state_json.get(_STATE_KEY) if isinstance(state_json, dict) else None
    pending = ours.get("paused", {}).get("pending") if isinstance(ours, Mapping) else None
    token = _restoring_limit.set(isinstance(pending, Mapping) and pending.get("kind") == "limit")
    try:
        state = await wrapped(*args, **kwargs)
    finally:
        _restoring_limit.reset(token)
    if isinstance(ours, Mapping) and isinstance(ours.get("paused"), Mapping):
        try:
            remember_pause(PausedRun.model_validate(ours["paused"]))
        except Exception:  # noqa: BLE001 - the state resumes as a fresh run; say so
            log.warning("otel-budget: could not read the pause saved in a RunState; resuming without it",
                        exc_info=True)
    return state


def resumption(run_state: Any) -> tuple[PausedRun, bool | None, list[Any]] | None:
    """For an SDK `RunState` given as input: the paused run it goes on from, the decision on the pending call,
    and the interruptions (None when the state did not come from one of our pauses)."""
    if run_state is None or type(run_state).__name__ != "RunState":
        return None
    items, ours = _our_pauses(run_state)
    for paused, tool, arguments, call_id in ours:
        pending = paused.pending
        if pending is None or (pending.kind == "tool"
                               and canonical_arguments(pending.arguments) != canonical_arguments(arguments)):
            continue
        with _paused_lock:
            _paused.pop(call_id or "", None)  # each pause is resumed once
        return paused, _decision(run_state, tool, call_id), items
    return None


def _decision(run_state: Any, tool: str, call_id: str | None) -> bool | None:
    context = getattr(run_state, "_context", None)
    if context is None or not call_id:
        return None
    try:
        status = context.is_tool_approved(tool, call_id)
    except Exception:  # noqa: BLE001
        return None
    return status if isinstance(status, bool) else None


def enter_run(run: Run, run_state: Any, items: list[Any]) -> None:
    """The run has started: the SDK owns approval pauses; its decisions on a resumed state's other calls apply."""
    node = run.node
    node.framework_approval = True
    if node.approval is None or not isinstance(run, ResumedRun):
        return
    context = getattr(run_state, "_context", None)
    primary = run.pending
    for item in items:
        tool, arguments, call_id = _call_of(item)
        if primary is not None and call_id == primary.call_id:
            continue
        operation = node.approval.operation(node, tool, arguments)
        if operation is None:
            continue
        call = PendingCall(tool=tool, arguments=arguments, call_id=call_id, operation=operation)
        node.approval.decide(node, call, _decision(run_state, tool, call_id))
    _set_alternative(node, run, run_state, context)


def _set_alternative(node: RunNode, run: ResumedRun, run_state: Any, context: Any) -> None:
    """A rejected call under a policy with an `alternative`: the model is told it (unless the person said more)."""
    rejection, pending = run.rejection, run.pending
    if rejection is None or pending is None or not pending.call_id or context is None or node.stop_state is not None:
        return
    if node.approval is None or node.approval.operation(node, pending.tool, pending.arguments) is None:
        return  # the SDK's own interruption (a tool's `needs_approval`): its rejection text stays the SDK's
    try:
        if context.get_rejection_message(pending.tool, pending.call_id) is not None:
            return
        for item in run_state.get_interruptions():
            if _call_of(item)[2] == pending.call_id:
                run_state.reject(item, rejection_message=rejection)
    except Exception:  # noqa: BLE001 - the SDK's default rejection text is used
        log.debug("otel-budget: could not set the rejection message", exc_info=True)


def pause_on_interruptions(node: RunNode, result: Any) -> None:
    """The SDK returned with interruptions (tool calls waiting for approval): the run pauses on one of them."""
    try:
        items = list(getattr(result, "interruptions", None) or ())
        calls = [_call_of(item) for item in items]
    except Exception:  # noqa: BLE001 - our bug must not break the agent
        log.warning("otel-budget: could not read the SDK's interruptions", exc_info=True)
        return
    if not calls:
        return
    gated = [c for c in calls if needs_approval(c[0], c[1], node)]
    tool, arguments, call_id = (gated or calls)[0]
    try:
        state = result.to_state().to_json()
    except Exception:  # noqa: BLE001 - the pause still holds the call and the quota
        log.warning("otel-budget: could not serialize the SDK run state of a paused run", exc_info=True)
        state = None
    limit = next((c for c in calls if c[0] == LIMIT_TOOL), None)
    pending = node.approval.pending if node.approval is not None else None
    if node.approval is not None and limit is not None and pending is not None and pending.kind == "limit":
        with node.approval.lock:  # paused at a limit: the pending limit, answered through the SDK's call id
            node.approval.pending = pending.model_copy(update={"call_id": limit[2]})
        if state is not None:
            node.saved_state = state
        return
    pause(tool, arguments, call_id, state=state, node=node)


async def _function_needs_approval(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The SDK asks whether a function call needs approval: yes as well when our policy says so."""
    evaluation = await wrapped(*args, **kwargs)
    try:
        if getattr(evaluation, "outcome", None) == "invoke":
            tool = args[0] if args else kwargs.get("function_tool")
            tool_call = args[2] if len(args) > 2 else kwargs.get("tool_call")
            if needs_approval(str(getattr(tool, "name", "")), getattr(tool_call, "arguments", None)):
                evaluation.outcome = "require_approval"
                evaluation.prepared = None
    except Exception:  # noqa: BLE001 - our bug: the SDK's own answer stands (execution is still gated)
        log.warning("otel-budget: the approval check failed", exc_info=True)
    return evaluation


# --- limit pauses: the SDK's own interruption ------------------------------------------------------------

_limit_tool: Any = None


def _the_limit_tool() -> Any:
    """LIMIT_TOOL as a function tool that always needs approval; approving it lets the run go on."""
    global _limit_tool
    if _limit_tool is None:
        from agents.tool import FunctionTool

        async def on_invoke(ctx: Any, arguments: str) -> str:
            return "A person decided to go on past the limit; the run goes on under the limits it was resumed with."

        _limit_tool = FunctionTool(
            name=LIMIT_TOOL,
            description="otel-budget: the run reached a limit and waits for a person to raise it (never sent).",
            params_json_schema={"type": "object", "properties": {"limit": {"type": "string"},
                                                                 "used": {"type": "number"},
                                                                 "cap": {"type": "number"}}},
            on_invoke_tool=on_invoke,
            strict_json_schema=False,
            needs_approval=True,
        )
    return _limit_tool


def pauses_at_limits() -> bool:
    """Whether the current run (or one it draws from), or the `RunState` being restored, pauses at limits."""
    if _restoring_limit.get():
        return True
    node = current_run()
    return node is not None and any(n.budget.on_limit == "pause" for n in node.chain)


async def _get_all_tools(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An agent's tools; in a run that pauses at limits, with LIMIT_TOOL, so the SDK can interrupt for it."""
    tools = await wrapped(*args, **kwargs)
    try:
        if pauses_at_limits() and isinstance(tools, list) and not any(
                getattr(t, "name", None) == LIMIT_TOOL for t in tools):
            return [*tools, _the_limit_tool()]
    except Exception:  # noqa: BLE001 - our bug must not break the agent (a limit pause then ends the run)
        log.warning("otel-budget: could not add the limit tool", exc_info=True)
    return tools


#: The SDK's approval check (where `turn_resolution` imported it too), agents' tools (LIMIT_TOOL), `RunState` JSON.
STATE_POINTS = (
    PatchPoint("agents.run_internal.tool_execution", "function_needs_approval", _function_needs_approval),
    PatchPoint("agents.run_internal.turn_resolution", "function_needs_approval", _function_needs_approval,
               optional=True),
    PatchPoint("agents.agent", "AgentBase.get_all_tools", _get_all_tools),
    *points("agents.run_state", {"RunState.to_json": _state_to_json, "RunState.from_json": _state_from_json}),
)
