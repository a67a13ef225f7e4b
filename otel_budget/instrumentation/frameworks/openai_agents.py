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

from typing import Any

from ...core.run import Run, RunNode
from ...model.budget import Budget, StopReason
from ...model.outcome import RunOutcome
from .._spec import AdapterSpec, points
from ._framework import attach, budget_from, open_run, outcome_of, run_name
from .openai_agents_models import MODEL_POINTS, answers
from .openai_agents_state import (
    STATE_POINTS,
    enter_run,
    load_state,
    pause_on_interruptions,
    remember_pause,
    resumption,
)


def outcome(result: Any) -> RunOutcome | None:
    """The RunOutcome of a `Runner.run` / `run_sync` / `run_streamed` result (None if it was not budgeted)."""
    return outcome_of(result)


# --- runs ---------------------------------------------------------------------------------------------------


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
        enter_run(run, run_state, items)
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ != "MaxTurnsExceeded":
                raise
            _max_turns_note(run.node, kwargs.get("max_turns"))
            max_turns_error = exc
        if result is not None:
            pause_on_interruptions(run.node, result)
    if max_turns_error is not None:
        attach(max_turns_error, run)
        raise max_turns_error
    if result is None:  # the run caught a stop that escaped the SDK: build the result it would have made
        result = _stopped_result(agent, args, kwargs, run)
    _finish(result, run)
    return result


def _finish(result: Any, run: Run) -> None:
    """The run's outcome on its result, the final wrap-up as its final output; a pause is kept for its resume."""
    answers.finish(result, run, "final_output")
    done = run.node.outcome
    if done is not None and not done.completed and done.paused is not None:
        remember_pause(done.paused)


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
        enter_run(run, run_state, items)
        await wrapped(*args, **kwargs)
        finished = True
        if streamed is not None:
            pause_on_interruptions(run.node, streamed)
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
    paused, approved, items = resumption(run_state) or (None, None, [])
    return open_run(run_name(agent), budget, paused, approved), items


SPEC = AdapterSpec(
    requires=("openai-agents >= 0.2, < 1",),
    patches=(*points("agents.run", {"AgentRunner.run": _runner_run, "start_streaming": _start_streaming}),
             *MODEL_POINTS, *STATE_POINTS),
)


__all__ = ["load_state", "outcome"]
