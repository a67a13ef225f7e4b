"""OpenAI Agents SDK: model calls the budget refuses are answered (a wrap-up message, or the limit pause's tool call)
before the SDK attempts them, streams included; function tools are admitted and spanned."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ...core.run import RunNode, current_run
from ...core.tools import begin_tool
from ...model.outcome import BudgetExceeded
from ...telemetry import semconv as sc
from .._spec import PatchPoint, points
from ._framework import Answers, cut_stop, limit_pause, own_stop, refused_here, run_tool
from .openai_agents_state import LIMIT_CALL_PREFIX, LIMIT_TOOL, field_of, pauses_at_limits

log = logging.getLogger(__name__)

#: Runs whose stop we answered with a wrap-up message (so the final output can carry the final wrap-up).
answers = Answers()


# --- model calls: a refused call is answered by the wrap-up ------------------------------------------------


def _stop_answer(node: RunNode, exc: BudgetExceeded) -> Any:
    """The answer to a refused model call: a call to LIMIT_TOOL when the run pauses at a limit (the SDK then
    interrupts for its approval), else the wrap-up message (the SDK ends the run with it)."""
    pending = limit_pause(node, exc)
    if pending is None:
        return _wrap_up_message(node, exc)
    from openai.types.responses import ResponseFunctionToolCall

    arguments = {"limit": pending.limit, "used": pending.used, "cap": pending.cap}
    call_id = f"{LIMIT_CALL_PREFIX}{uuid.uuid4().hex[:24]}"
    return ResponseFunctionToolCall(type="function_call", id=call_id, call_id=call_id, name=LIMIT_TOOL,
                                    arguments=json.dumps(arguments), status="completed")


def _wrap_up_message(node: RunNode, exc: BudgetExceeded) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    text = answers.answer(node, exc)
    return ResponseOutputMessage(
        id="otel_budget_stop",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


def _truncation_stop(exc: BaseException) -> BudgetExceeded | None:
    """The SDK failed on an answer the budget cut short (`note_truncation`): that stop, to answer with."""
    return cut_stop(current_run()) if type(exc).__name__ == "ModelBehaviorError" else None


def _answerable(exc: Exception) -> tuple[RunNode, BudgetExceeded] | None:
    """The run and the stop a failed model call is answered with (the run's own refusal, or an answer the budget
    cut), else None: the error goes on."""
    stop = exc if isinstance(exc, BudgetExceeded) else _truncation_stop(exc)
    node = refused_here(stop) if stop is not None else None
    return (node, stop) if node is not None and stop is not None else None


def _stop_response(node: RunNode, stop: BudgetExceeded) -> Any:
    """A model response carrying the stop's answer (`_stop_answer`), as if the model had given it."""
    from agents.items import ModelResponse
    from agents.usage import Usage

    return ModelResponse(output=[_stop_answer(node, stop)], usage=Usage(), response_id=None)


async def _get_response(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    except Exception as exc:
        found = _answerable(exc)
        if found is None:
            raise
        return _stop_response(*found)


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
        return (node, exc) if own_stop(node, exc) is not None else None
    return None


def _is_limit_item(item: Any) -> bool:
    call_id = item.get("call_id") if type(item) is dict else field_of(item, "call_id")
    return type(call_id) is str and call_id.startswith(LIMIT_CALL_PREFIX)


def _model_view(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A model call's arguments without LIMIT_TOOL and the items of a limit pause (its call, the approval's output),
    so the model sees the conversation as it was before the pause and never the tool (runs that pause at limits
    only: no other run has them)."""
    if not pauses_at_limits():
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
    return _stop_response(*found)


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
        found = _answerable(exc)
        if found is None:
            raise
        yield _completed_event(*found)


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
    return await run_tool(state, lambda: wrapped(*args, **kwargs), lambda result: getattr(result, "output", result))


#: The SDK's model calls and function tools; its OpenAI models: a call the budget refuses ends the turn before the
#: SDK attempts it (no error span).
MODEL_POINTS = (
    *points("agents.run_internal.run_loop", {"get_response_with_retry": _get_response,
                                             "stream_response_with_retry": _stream_response}),
    PatchPoint("agents.run_internal.tool_execution", "_invoke_function_tool_with_metadata", _invoke_tool),
    *points("agents.models.openai_responses", {"OpenAIResponsesModel.get_response": _model_get_response,
                                               "OpenAIResponsesModel.stream_response": _model_stream_response}),
    *points("agents.models.openai_chatcompletions", {
        "OpenAIChatCompletionsModel.get_response": _model_get_response,
        "OpenAIChatCompletionsModel.stream_response": _model_stream_response}),
)
