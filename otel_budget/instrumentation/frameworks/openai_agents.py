"""OpenAI Agents SDK (`openai-agents`): every `Runner.run`, `run_sync` and `run_streamed` is a budgeted run.

- The run is named after the starting agent. Its budget is the one the call brings in its `context`
  (`context={"otel_budget": Budget(...)}` or a context object with an `otel_budget` attribute), else the
  default given to `instrument()`. A `Runner.run` inside a run (an `Agent.as_tool` sub-agent, or a runner
  called from a tool) is a child run that draws from its parents; handoffs stay in the same run.
- Model calls are charged by the openai provider patch (Responses API or chat completions); nothing here
  charges them again. Function tool executions get `execute_tool` spans; the tool call the model requested
  was already counted, so running it is not counted twice.
- A stop: the model call the budget refuses is answered, without being sent, by a final assistant message
  carrying the wrap-up, so the SDK ends the run the usual way (`result.final_output` is the wrap-up, streamed
  runs end their event stream normally). A refused tool execution is not run; the model gets a short refusal
  as the tool's output. `outcome(result)` gives the RunOutcome; `stop.reason` is on the run span.
- The SDK's own `max_turns` keeps working: `MaxTurnsExceeded` is raised as before and the run ends `steps`.
- An answer cut at the output limit the budget set (a cost or token cap, no `ModelSettings.max_tokens`) makes
  the SDK raise `ModelBehaviorError`; the run instead ends with that limit (`cost` / `tokens`) and the wrap-up.
- Approval (`Budget(approve=[...])`) uses the SDK's own mechanism: a function tool our policy names needs
  approval as if it had `needs_approval=True`, so the SDK runs the rest of the batch and returns with
  `result.interruptions`. The run ends `awaiting_approval`; `outcome(result).paused.state` is
  `result.to_state().to_json()`. Any other interruption (the tool's own `needs_approval`) pauses the run too.
  Decide on the SDK state (`state.approve(item)` / `state.reject(item)`) and call `Runner.run(agent, state)`:
  the run goes on with the quota it used, the approval covers exactly that call (other arguments ask again),
  and a rejection of a call our policy names ends the run `denied` (or tells the model the policy's
  `alternative`). In another process, `state = await load_state(agent, paused)` first.
- A limit pause (`Budget(on_limit="pause")`) is one of the SDK's interruptions too: the refused model call is not
  sent; it is answered by a call to the `otel_budget_limit` tool (arguments: limit, used, cap), which needs
  approval, so `result.interruptions` holds it and `result.to_state()` (`to_string()` / `RunState.from_string`,
  in any process) keeps the pause with the quota used. `state.approve(item)` and `Runner.run(agent, state,
  context={"otel_budget": Budget(max_usd=...)})` (or `hooks=BudgetHooks(...)`: a budget given to the resuming
  call wins over the one saved in the state) goes on under those limits with the quota used counted, so it never
  passes them; without a new budget it pauses again at once. `state.reject(item)` ends the run with the limit's
  own stop reason and the wrap-up as the final output. The tool and its items are never sent to the model (the
  SDK's OpenAI models; it is added only to runs that pause at limits).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from typing import Any

from opentelemetry import trace

from ...core.resume import ResumedRun, needs_approval, pause, resume
from ...core.run import Run, RunNode, current_run
from ...core.tools import begin_tool, end_tool
from ...model.budget import Budget, StopReason
from ...model.outcome import BudgetExceeded, RunOutcome
from ...model.paused import PausedRun, PendingCall
from ...model.signatures import canonical_arguments
from ...telemetry import semconv as sc
from .._patch import Patches
from ._framework import BUDGET_KEY, budget_from, limit_pause, stop_text

log = logging.getLogger(__name__)

_OUTCOME_ATTR = "otel_budget_outcome"
#: Runs whose stop we answered with a wrap-up message (so the final output can carry the final wrap-up).
_answered: weakref.WeakKeyDictionary[RunNode, str] = weakref.WeakKeyDictionary()
#: Pending tool call id -> the paused run waiting on it (this process), for `Runner.run(agent, state)`.
_paused: OrderedDict[str, PausedRun] = OrderedDict()
_paused_lock = threading.Lock()
_PAUSED_MAX = 10_000
#: Our top-level key in the SDK's `RunState` JSON: the pause (quota used, decisions) travels with the state.
_STATE_KEY = "otel_budget"
#: The tool through which a limit pause (`on_limit="pause"`) becomes one of the SDK's own interruptions: a refused
#: model call is answered by a call to it, which needs approval. The model never sees it (see `_model_view`).
LIMIT_TOOL = "otel_budget_limit"
_LIMIT_CALL_PREFIX = "otel_budget_limit_"
#: Set while the SDK restores a `RunState` paused at a limit: the agent's tools then include LIMIT_TOOL.
_restoring_limit: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_budget_restoring_limit", default=False)


def outcome(result: Any) -> RunOutcome | None:
    """The RunOutcome of a `Runner.run` / `run_sync` / `run_streamed` result (None if it was not budgeted)."""
    return getattr(result, _OUTCOME_ATTR, None)


# --- runs ---------------------------------------------------------------------------------------------------


def _agent_name(agent: Any) -> str:
    return str(getattr(agent, "name", None) or "agent")


def _max_turns_note(node: RunNode, max_turns: Any) -> None:
    if node.stop_state is None:
        node.stop_state = (StopReason.STEPS, "max_turns", f"the agent reached the SDK's max_turns ({max_turns}).")


async def _runner_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    agent = args[0] if args else kwargs.get("starting_agent")
    run_state = args[1] if len(args) > 1 else kwargs.get("input")
    run, items = _open_run(agent, kwargs.get("context"), run_state, kwargs.get("hooks"))
    result: Any = None
    max_turns_error: BaseException | None = None
    async with run:
        _enter(run, run_state, items)
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ != "MaxTurnsExceeded":
                raise
            _max_turns_note(run.node, kwargs.get("max_turns"))
            max_turns_error = exc
        if result is not None:
            _pause_on_interruptions(run.node, result)
    if max_turns_error is not None:
        _attach(max_turns_error, run)
        raise max_turns_error
    if result is None:  # the run caught a stop that escaped the SDK: build the result it would have made
        result = _stopped_result(agent, args, kwargs, run)
    _finish(result, run)
    return result


def _finish(result: Any, run: Run) -> None:
    _attach(result, run)
    done = run.node.outcome
    if done is None or done.completed:
        return
    if done.paused is not None and done.paused.pending is not None and done.paused.pending.call_id:
        _remember(done.paused)
    answered = _answered.pop(run.node, None)
    if answered is not None and getattr(result, "final_output", None) == answered:
        result.final_output = done.wrap_up  # the final text (with a model-written summary, if configured)


def _attach(obj: Any, run: Run) -> None:
    try:
        setattr(obj, _OUTCOME_ATTR, run.node.outcome)
    except Exception:  # noqa: BLE001
        pass


def _stopped_result(agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any], run: Run) -> Any:
    from agents.result import RunResult
    from agents.run_context import RunContextWrapper
    from agents.run_internal.error_handlers import create_message_output_item

    text = run.node.outcome.wrap_up if run.node.outcome is not None else "Stopped at a limit."
    items = [create_message_output_item(agent, text)]
    raw_input = args[1] if len(args) > 1 else kwargs.get("input", "")
    return RunResult(
        input=raw_input if isinstance(raw_input, (str, list)) else "",
        new_items=items,  # type: ignore[arg-type]
        raw_responses=[],
        final_output=text,
        input_guardrail_results=[],
        output_guardrail_results=[],
        tool_input_guardrail_results=[],
        tool_output_guardrail_results=[],
        context_wrapper=RunContextWrapper(context=kwargs.get("context")),
        _last_agent=agent,
    )


async def _start_streaming(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    streamed = kwargs.get("streamed_result")
    wrapper = kwargs.get("context_wrapper")
    run_state = kwargs.get("run_state")
    run, items = _open_run(kwargs.get("starting_agent"), getattr(wrapper, "context", None), run_state,
                           kwargs.get("hooks"))
    finished = False
    async with run:
        _enter(run, run_state, items)
        await wrapped(*args, **kwargs)
        finished = True
        if streamed is not None:
            _pause_on_interruptions(run.node, streamed)
        max_turns = kwargs.get("max_turns")
        turn = getattr(streamed, "current_turn", 0) or 0
        if isinstance(max_turns, int) and turn > max_turns and not getattr(streamed, "_max_turns_handled", False):
            _max_turns_note(run.node, max_turns)
    if streamed is None:
        return
    if not finished and run.node.outcome is not None:  # a stop escaped the SDK: end the stream with the wrap-up
        streamed.final_output = run.node.outcome.wrap_up
        streamed.is_complete = True
    _finish(streamed, run)


# --- approval: the SDK's interruptions are our pauses ----------------------------------------------------


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _call_of(item: Any) -> tuple[str, Any, str | None]:
    """(tool name, arguments, call id) of a `ToolApprovalItem`."""
    raw = getattr(item, "raw_item", None)
    name = getattr(item, "tool_name", None) or _get(raw, "name") or "tool"
    call_id = _get(raw, "call_id") or _get(raw, "id")
    return str(name), _get(raw, "arguments"), str(call_id) if call_id else None


def _remember(paused: PausedRun) -> None:
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
    _remember(paused)
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
            _remember(PausedRun.model_validate(ours["paused"]))
        except Exception:  # noqa: BLE001 - the state resumes as a fresh run; say so
            log.warning("otel-budget: could not read the pause saved in a RunState; resuming without it",
                        exc_info=True)
    return state


def _resumption(run_state: Any) -> tuple[PausedRun, bool | None, list[Any]] | None:
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


def _open_run(agent: Any, context: Any, run_state: Any, hooks: Any = None) -> tuple[Run, list[Any]]:
    """The run of a `Runner.run`: a fresh one, or, for a state paused by us, the paused run going on (with the
    state's interruptions). The budget comes from the context, else from `hooks=BudgetHooks(...)`; for a `RunState`
    input, a budget given to this call (its `context`, else its hooks) wins over the one saved in the state's
    context, so a resume can bring larger limits (`Runner.run(agent, state, context={"otel_budget": Budget(...)})`)."""
    budget = budget_from(context) or getattr(hooks, "budget", None)
    if not isinstance(budget, Budget) and context is None and run_state is not None:
        budget = budget_from(getattr(getattr(run_state, "_context", None), "context", None))
    if not isinstance(budget, Budget):
        budget = None
    found = _resumption(run_state)
    if found is None:
        return Run(_agent_name(agent), budget), []
    paused, approved, items = found
    return resume(paused, approved=approved, budget=budget), items


def _enter(run: Run, run_state: Any, items: list[Any]) -> None:
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


def _pause_on_interruptions(node: RunNode, result: Any) -> None:
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


def _pauses_at_limits() -> bool:
    if _restoring_limit.get():
        return True
    node = current_run()
    return node is not None and any(n.budget.on_limit == "pause" for n in node.chain)


async def _get_all_tools(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An agent's tools; in a run that pauses at limits, with LIMIT_TOOL, so the SDK can interrupt for it."""
    tools = await wrapped(*args, **kwargs)
    try:
        if _pauses_at_limits() and isinstance(tools, list) and not any(
                getattr(t, "name", None) == LIMIT_TOOL for t in tools):
            return [*tools, _the_limit_tool()]
    except Exception:  # noqa: BLE001 - our bug must not break the agent (a limit pause then ends the run)
        log.warning("otel-budget: could not add the limit tool", exc_info=True)
    return tools


# --- model calls: a refused call is answered by the wrap-up ------------------------------------------------


def _refused_here(exc: BudgetExceeded) -> RunNode | None:
    node = current_run()
    if node is None or node.id not in getattr(exc, "run_path", ()):
        return None
    return node


def _stop_answer(node: RunNode, exc: BudgetExceeded) -> Any:
    """The answer to a refused model call: a call to LIMIT_TOOL when the run pauses at a limit (the SDK then
    interrupts for its approval), else the wrap-up message (the SDK ends the run with it)."""
    pending = limit_pause(node, exc)
    if pending is None:
        return _wrap_up_message(node, exc)
    from openai.types.responses import ResponseFunctionToolCall

    arguments = {"limit": pending.limit, "used": pending.used, "cap": pending.cap}
    call_id = f"{_LIMIT_CALL_PREFIX}{uuid.uuid4().hex[:24]}"
    return ResponseFunctionToolCall(type="function_call", id=call_id, call_id=call_id, name=LIMIT_TOOL,
                                    arguments=json.dumps(arguments), status="completed")


def _wrap_up_message(node: RunNode, exc: BudgetExceeded) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    text = stop_text(node, exc)
    _answered[node] = text
    return ResponseOutputMessage(
        id="otel_budget_stop",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


def _truncation_stop(exc: BaseException) -> BudgetExceeded | None:
    """The SDK failed on an answer the budget cut short (`note_truncation`): that stop, to answer with."""
    node = current_run()
    if node is None or not node.truncated_by_budget or node.stop_state is None:
        return None
    if type(exc).__name__ != "ModelBehaviorError":
        return None
    reason, limit, detail = node.stop_state
    stop = BudgetExceeded(reason, detail, limit=limit, outcome=node.snapshot(reason, limit, detail))
    stop.run_id = node.id
    stop.run_path = node.path  # type: ignore[attr-defined]
    return stop


async def _get_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    except Exception as exc:
        stop = exc if isinstance(exc, BudgetExceeded) else _truncation_stop(exc)
        node = _refused_here(stop) if stop is not None else None
        if node is None or stop is None:
            raise
        from agents.items import ModelResponse
        from agents.usage import Usage

        return ModelResponse(output=[_stop_answer(node, stop)], usage=Usage(), response_id=None)


#: Input fields whose text is sent as it is: their length is a lower bound of the request's size.
_TEXT_FIELDS = frozenset({"content", "text", "arguments", "output", "input"})


def _text_chars(value: Any, counted: bool = True) -> int:
    if isinstance(value, str):
        return len(value) if counted else 0
    if isinstance(value, Mapping):
        return sum(_text_chars(v, k in _TEXT_FIELDS) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_text_chars(v, counted) for v in value)
    return 0


def _model_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(system instructions, input, model settings) of a `Model.get_response` / `stream_response` call."""
    names = ("system_instructions", "input", "model_settings")
    values = [args[i] if len(args) > i else kwargs.get(name) for i, name in enumerate(names)]
    return values[0], values[1], values[2]


def _precheck(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[RunNode, BudgetExceeded] | None:
    """The stop, when the budget would refuse this model call: found before the SDK attempts the call, so its
    trace and logs show a run that ended, not a failed model call. The call itself is admitted when sent."""
    node = current_run()
    name = getattr(model, "model", None)
    if node is None or not isinstance(name, str):
        return None
    try:
        instructions, items, settings = _model_args(args, kwargs)
        max_tokens = getattr(settings, "max_tokens", None)
        chars = len(instructions or "") + _text_chars(items)
    except Exception:  # noqa: BLE001 - our bug: the call goes on and is admitted when sent
        log.debug("otel-budget: could not read an Agents SDK model call", exc_info=True)
        return None
    try:
        node.precheck(sc.PROVIDER_OPENAI, name, max_tokens if isinstance(max_tokens, int) else None, lambda: chars)
    except BudgetExceeded as exc:
        return (node, exc) if node.id in getattr(exc, "run_path", ()) else None
    return None


def _is_limit_item(item: Any) -> bool:
    call_id = item.get("call_id") if type(item) is dict else _get(item, "call_id")
    return type(call_id) is str and call_id.startswith(_LIMIT_CALL_PREFIX)


def _model_view(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A model call's arguments without LIMIT_TOOL and the items of a limit pause (its call, the approval's output),
    so the model sees the conversation as it was before the pause and never the tool (runs that pause at limits
    only: no other run has them)."""
    if not _pauses_at_limits():
        return args, kwargs
    names = ("system_instructions", "input", "model_settings", "tools")
    values = {name: args[i] if len(args) > i else kwargs.get(name) for i, name in enumerate(names)}
    items, tools = values["input"], values["tools"]
    changed: dict[str, Any] = {}
    if isinstance(items, list) and any(_is_limit_item(item) for item in items):
        changed["input"] = [item for item in items if not _is_limit_item(item)]
    if isinstance(tools, list) and any(getattr(t, "name", None) == LIMIT_TOOL for t in tools):
        changed["tools"] = [t for t in tools if getattr(t, "name", None) != LIMIT_TOOL]
    if not changed:
        return args, kwargs
    args = tuple(changed.get(names[i], v) if i < len(names) else v for i, v in enumerate(args))
    return args, {**kwargs, **{k: v for k, v in changed.items() if k in kwargs}}


async def _model_get_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    args, kwargs = _model_view(args, kwargs)
    found = _precheck(instance, args, kwargs)
    if found is None:
        return await wrapped(*args, **kwargs)
    from agents.items import ModelResponse
    from agents.usage import Usage

    return ModelResponse(output=[_stop_answer(*found)], usage=Usage(), response_id=None)


def _model_stream_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    args, kwargs = _model_view(args, kwargs)
    return _prechecked_stream(wrapped, instance, args, kwargs)


async def _prechecked_stream(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                             ) -> AsyncIterator[Any]:
    found = _precheck(instance, args, kwargs)
    if found is not None:
        yield _completed_event(*found)
        return
    events = wrapped(*args, **kwargs)
    async with contextlib.aclosing(events):
        async for event in events:
            yield event


def _completed_event(node: RunNode, stop: BudgetExceeded) -> Any:
    """The last event of a stream that ends with the stop's answer (`_stop_answer`) instead of a model answer."""
    from openai.types.responses import Response, ResponseCompletedEvent

    response = Response.model_construct(
        id="otel_budget_stop", object="response", output=[_stop_answer(node, stop)], usage=None,
        status="completed", model="", created_at=0.0, parallel_tool_calls=False, tool_choice="none", tools=[],
    )
    return ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def _stream_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _guarded_stream(wrapped(*args, **kwargs))


async def _guarded_stream(events: Any) -> AsyncIterator[Any]:
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                yield event
    except Exception as exc:
        stop = exc if isinstance(exc, BudgetExceeded) else _truncation_stop(exc)
        node = _refused_here(stop) if stop is not None else None
        if node is None or stop is None:
            raise
        yield _completed_event(node, stop)


# --- tools -----------------------------------------------------------------------------------------------


async def _invoke_tool(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool = kwargs.get("function_tool")
    name = str(getattr(tool, "name", None) or "tool")
    if name == LIMIT_TOOL:
        return await wrapped(*args, **kwargs)  # the approval of a limit pause: not a tool call of the run
    call_id = getattr(kwargs.get("context"), "tool_call_id", None)
    try:
        state = begin_tool(name, kwargs.get("arguments"), call_id)
    except BudgetExceeded as exc:
        from agents.tool import _FunctionToolInvocationResult

        return _FunctionToolInvocationResult(f"Not run: {exc.message}", is_sdk_generated_error=True)
    span = state[3]
    try:
        with trace.use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
            result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        end_tool(state, None, exc)
        raise
    end_tool(state, getattr(result, "output", result))
    return result


def instrument(patches: Patches) -> bool:
    """Patch the installed OpenAI Agents SDK; False when it is not installed."""
    try:
        import agents.run as agents_run
        from agents.run_internal import run_loop, tool_execution
    except ImportError:
        return False
    ok = patches.wrap(agents_run.AgentRunner, "run", _runner_run)
    ok = patches.wrap(agents_run, "start_streaming", _start_streaming) and ok
    ok = patches.wrap(run_loop, "get_response_with_retry", _get_response) and ok
    ok = patches.wrap(run_loop, "stream_response_with_retry", _stream_response) and ok
    ok = patches.wrap(tool_execution, "_invoke_function_tool_with_metadata", _invoke_tool) and ok
    ok = patches.wrap(tool_execution, "function_needs_approval", _function_needs_approval) and ok
    try:
        from agents.run_internal import turn_resolution
    except ImportError:
        turn_resolution = None  # type: ignore[assignment]
    if turn_resolution is not None and "function_needs_approval" in vars(turn_resolution):
        ok = patches.wrap(turn_resolution, "function_needs_approval", _function_needs_approval) and ok
    ok = _patch_models(patches) and ok
    try:
        from agents.agent import AgentBase
    except ImportError:
        AgentBase = None  # type: ignore[assignment,misc]  # noqa: N806
    ok = AgentBase is not None and patches.wrap(AgentBase, "get_all_tools", _get_all_tools) and ok
    try:
        from agents.run_state import RunState
    except ImportError:
        RunState = None  # type: ignore[assignment,misc]  # noqa: N806
    if RunState is not None:
        ok = patches.wrap(RunState, "to_json", _state_to_json) and ok
        ok = patches.wrap(RunState, "from_json", _state_from_json) and ok
    if not ok:
        log.warning("otel-budget: this openai-agents version lacks a patch point; some of it is not budgeted")
    return True


def _patch_models(patches: Patches) -> bool:
    """The OpenAI models: a call the budget refuses ends the turn before the SDK attempts it (no error span)."""
    ok = True
    for module_name, class_name in (("agents.models.openai_responses", "OpenAIResponsesModel"),
                                    ("agents.models.openai_chatcompletions", "OpenAIChatCompletionsModel")):
        try:
            module = __import__(module_name, fromlist=[class_name])
        except ImportError:
            ok = False
            continue
        cls = getattr(module, class_name, None)
        ok = cls is not None and patches.wrap(cls, "get_response", _model_get_response) and ok
        ok = cls is not None and patches.wrap(cls, "stream_response", _model_stream_response) and ok
    return ok


__all__ = ["load_state", "outcome"]
