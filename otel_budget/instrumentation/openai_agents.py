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
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry import trace

from ..budget import BudgetExceeded, RunOutcome, StopReason
from ..run import Run, RunNode, current_run
from ..tools import begin_tool, end_tool
from ._framework import budget_from, stop_text
from ._patch import Patches

log = logging.getLogger(__name__)

_OUTCOME_ATTR = "otel_budget_outcome"
#: Runs whose stop we answered with a wrap-up message (so the final output can carry the final wrap-up).
_answered: weakref.WeakKeyDictionary[RunNode, str] = weakref.WeakKeyDictionary()


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
    run = Run(_agent_name(agent), budget_from(kwargs.get("context")))
    result: Any = None
    max_turns_error: BaseException | None = None
    async with run:
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ != "MaxTurnsExceeded":
                raise
            _max_turns_note(run.node, kwargs.get("max_turns"))
            max_turns_error = exc
    if max_turns_error is not None:
        _attach(max_turns_error, run)
        raise max_turns_error
    if result is None:  # the run caught a stop that escaped the SDK: build the result it would have made
        result = _stopped_result(agent, args, kwargs, run)
    _finish(result, run)
    return result


def _finish(result: Any, run: Run) -> None:
    _attach(result, run)
    done = run.outcome
    if done is None or done.completed:
        return
    answered = _answered.pop(run.node, None)
    if answered is not None and getattr(result, "final_output", None) == answered:
        result.final_output = done.wrap_up  # the final text (with a model-written summary, if configured)


def _attach(obj: Any, run: Run) -> None:
    try:
        setattr(obj, _OUTCOME_ATTR, run.outcome)
    except Exception:  # noqa: BLE001
        pass


def _stopped_result(agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any], run: Run) -> Any:
    from agents.result import RunResult
    from agents.run_context import RunContextWrapper
    from agents.run_internal.error_handlers import create_message_output_item

    text = run.outcome.wrap_up if run.outcome is not None else "Stopped at a limit."
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
    run = Run(_agent_name(kwargs.get("starting_agent")), budget_from(getattr(wrapper, "context", None)))
    finished = False
    async with run:
        await wrapped(*args, **kwargs)
        finished = True
        max_turns = kwargs.get("max_turns")
        turn = getattr(streamed, "current_turn", 0) or 0
        if isinstance(max_turns, int) and turn > max_turns and not getattr(streamed, "_max_turns_handled", False):
            _max_turns_note(run.node, max_turns)
    if streamed is None:
        return
    if not finished and run.outcome is not None:  # a stop escaped the SDK: end the stream with the wrap-up
        streamed.final_output = run.outcome.wrap_up
        streamed.is_complete = True
    _finish(streamed, run)


# --- model calls: a refused call is answered by the wrap-up ------------------------------------------------


def _refused_here(exc: BudgetExceeded) -> RunNode | None:
    node = current_run()
    if node is None or node.id not in getattr(exc, "run_path", ()):
        return None
    return node


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


async def _get_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    except BudgetExceeded as exc:
        node = _refused_here(exc)
        if node is None:
            raise
        from agents.items import ModelResponse
        from agents.usage import Usage

        return ModelResponse(output=[_wrap_up_message(node, exc)], usage=Usage(), response_id=None)


def _stream_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _guarded_stream(wrapped(*args, **kwargs))


async def _guarded_stream(events: Any) -> AsyncIterator[Any]:
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                yield event
    except BudgetExceeded as exc:
        node = _refused_here(exc)
        if node is None:
            raise
        from openai.types.responses import Response, ResponseCompletedEvent

        response = Response.model_construct(
            id="otel_budget_stop", object="response", output=[_wrap_up_message(node, exc)], usage=None,
            status="completed", model="", created_at=0.0, parallel_tool_calls=False, tool_choice="none", tools=[],
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


# --- tools -----------------------------------------------------------------------------------------------


async def _invoke_tool(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tool = kwargs.get("function_tool")
    name = str(getattr(tool, "name", None) or "tool")
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
    if not ok:
        log.warning("otel-budget: this openai-agents version lacks a patch point; some of it is not budgeted")
    return True


__all__ = ["outcome"]
