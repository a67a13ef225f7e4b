"""pydantic-ai: every `Agent.run`, `run_sync`, `run_stream` and `iter` is a budgeted run.

- All four go through `Agent.iter`, patched once. The run is named after the agent (`agent.name`, "agent" unless
  set). Its budget is the `otel_budget.pydantic_ai.BudgetLimits` capability the call brings
  (`agent.run(..., capabilities=[BudgetLimits(Budget(...))])`) or the agent was built with
  (`Agent(..., capabilities=[...])`), else the default given to `instrument()`. An agent run inside a run (an
  agent called from a tool: delegation) is a child run that draws from its parents.
- Model calls are checked and charged by the provider patches underneath (pydantic-ai's OpenAI models use the
  openai SDK, its Anthropic model the anthropic SDK, its Google model google-genai). Each run gets one more
  capability of ours, which only maps: a refused call becomes the final answer, tools are admitted and spanned.
- A stop: the model request the budget refuses is not sent; when the run's output may be text (`output_type` str,
  the default) it is answered by a text response carrying the wrap-up, so the run ends the usual way and
  `result.output` is the wrap-up (a streamed request refused as its stream opens gets a one-part stream of the
  wrap-up). An answer cut at the output limit the budget set is replaced by the wrap-up the same way (in
  `run_stream` the stream's consumer, who already got the cut text, gets the wrap-up after it; the output and the
  history are the wrap-up). When the output type allows no text (a structured output), `agent.run()` raises
  `otel_budget.BudgetExceeded` after the run closed; its `.outcome` is the run's final RunOutcome. A refused tool
  execution is not run; the model gets a short refusal as the tool's result. `outcome(result)` gives the
  RunOutcome; `stop.reason` is on the run span.
- pydantic-ai's own `UsageLimits` keep working: `UsageLimitExceeded` is raised as before and the run ends with the
  matching stop reason (`steps`, `tool_calls` or `tokens`; `cost` for its `cost_limit`) and `outcome.limit` naming
  pydantic-ai's limit (e.g. `request_limit`).
- One span per request: with pydantic-ai's instrumentation on (`Agent(capabilities=[Instrumentation(...)])`,
  `agent.instrument = ...`, `Agent.instrument_all()`), its model-request span is left out for requests our
  provider patch spans (inside a run), so each request has exactly one LLM span (ours, with cost and budget
  attributes; a call that was never sent has none), and its agent-run and tool spans stay; our own tool span is
  then left out, so each tool execution is spanned once.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import SkipModelRequest
from pydantic_ai.messages import ModelResponse, ModelResponseStreamEvent, TextPart
from pydantic_ai.models import StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel

from ...core import config
from ...core.run import Run, RunNode, current_run
from ...core.tools import begin_tool, end_tool
from ...model.budget import Budget, StopReason
from ...model.outcome import BudgetExceeded, RunOutcome
from .._spec import AdapterSpec, PatchPoint
from ._framework import Answers, attach, budget_from, cut_stop, outcome_of, refused_here, run_name

log = logging.getLogger(__name__)

#: pydantic-ai model modules -> our provider module whose patch meters (and spans) their requests.
_METERED_BY = {
    "pydantic_ai.models.openai": "openai",
    "pydantic_ai.models.anthropic": "anthropic",
    "pydantic_ai.models.google": "google_genai",
}
#: Runs whose stop we answered with a wrap-up response (so the final output can carry the final wrap-up).
_answers = Answers()
#: UsageLimitExceeded message fragment -> (stop reason, limit) of the run it ends.
_USAGE_LIMITS = (
    ("request_limit", StopReason.STEPS), ("tool_calls_limit", StopReason.TOOL_CALLS),
    ("cost_limit", StopReason.COST), ("tokens_limit", StopReason.TOKENS),
)


def outcome(result: Any) -> RunOutcome | None:
    """The RunOutcome of an `Agent.run` / `run_sync` / `run_stream` / `iter` result (None if it was not budgeted)."""
    return outcome_of(result)


# --- runs ---------------------------------------------------------------------------------------------------


def _budget(agent: Any, kwargs: dict[str, Any]) -> Budget | None:
    """The budget of the call's `BudgetLimits` capability, else of the agent's, else None."""
    for capabilities in (kwargs.get("capabilities"), _agent_capabilities(agent)):
        for capability in capabilities or ():
            found = budget_from(capability)
            if found is not None:
                return found
    return None


def _agent_capabilities(agent: Any) -> Any:
    root = getattr(agent, "root_capability", None)
    leaves = getattr(root, "capabilities", None)
    return leaves if leaves is not None else getattr(agent, "_capabilities", None)


def _iter(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    run = Run(run_name(instance), _budget(instance, kwargs))
    kwargs = {**kwargs, "capabilities": [*(kwargs.get("capabilities") or ()), _Enforcer()]}
    return _budgeted(run, lambda: wrapped(*args, **kwargs))


@contextlib.asynccontextmanager
async def _budgeted(run: Run, make: Any) -> AsyncIterator[Any]:
    agent_run: Any = None
    stop: BaseException | None = None
    async with run:
        try:
            async with make() as agent_run:
                yield agent_run
        except BudgetExceeded as exc:
            stop = exc  # not answered by a result (a structured output): raised after the run closed
            raise
        except Exception as exc:
            stop = _usage_limit(run.node, exc)
            if stop is None:
                raise
    result = getattr(agent_run, "result", None)
    if stop is not None:
        if isinstance(stop, BudgetExceeded) and run.node.outcome is not None:
            stop.outcome = run.node.outcome
        attach(stop, run)
        raise stop
    if result is not None:
        _answers.finish(result, run, "output")
    elif agent_run is not None and run.node.outcome is not None and not run.node.outcome.completed:
        attach(agent_run, run)


def _usage_limit(node: RunNode, exc: BaseException) -> BaseException | None:
    """pydantic-ai's own `UsageLimits` stopped the run: it ends with that limit; the error is raised as before."""
    if type(exc).__name__ != "UsageLimitExceeded":
        return None
    text = str(exc)
    reason = next((r for key, r in _USAGE_LIMITS if key in text), StopReason.STEPS)
    named = re.search(r"\b(\w+_limit)\b", text)
    if node.stop_state is None:
        node.stop_state = (reason, named.group(1) if named else None, f"pydantic-ai's UsageLimits stopped the run: "
                           f"{text}.")
    return exc


# --- what the run's capability calls ------------------------------------------------------------------------


def metered(model: Any) -> bool:
    """Whether one of our provider patches meters and spans this pydantic-ai model's requests."""
    from .. import patched

    for _ in range(8):  # unwrap wrapper models (instrumented, fallback-free wrappers)
        inner = getattr(model, "wrapped", None)
        if inner is None:
            break
        model = inner
    module = type(model).__module__
    ours = next((p for prefix, p in _METERED_BY.items() if module == prefix or module.startswith(prefix + ".")), None)
    return ours is not None and ours in patched()


async def _model_request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """pydantic-ai's instrumentation around a model request: left out inside a run when our patch spans it."""
    request_context = kwargs.get("request_context")
    handler = kwargs.get("handler")
    try:
        skip = (
            handler is not None and current_run() is not None and config.get().instrumented
            and metered(getattr(request_context, "model", None))
        )
    except Exception:  # noqa: BLE001 - our bug: their span stays
        skip = False
    if skip:
        return await handler(request_context)  # type: ignore[misc]
    return await wrapped(*args, **kwargs)


def tool_begin(ctx: Any, name: str, args: Any, call_id: str | None) -> tuple:
    """Admit a tool execution (raises BudgetExceeded); spanned by us unless pydantic-ai's instrumentation spans it."""
    if _instrumented_by_pydantic_ai(ctx):
        node = current_run()
        reserved = node.admit_tool(name, args, 0.0) if node is not None else {}
        return node, name, reserved, None, 0.0, args
    return begin_tool(name, args, call_id)


def tool_end(state: tuple, result: Any, error: BaseException | None = None) -> None:
    end_tool(state, result, error)


def _instrumented_by_pydantic_ai(ctx: Any) -> bool:
    try:
        from pydantic_ai.capabilities.instrumentation import Instrumentation
    except ImportError:
        return False
    capabilities = getattr(ctx, "capabilities", None)
    values = capabilities.values() if isinstance(capabilities, dict) else capabilities or ()
    return any(isinstance(c, Instrumentation) for c in values)


#: Agent runs, and its instrumentation's model-request span.
SPEC = AdapterSpec(
    requires=("pydantic-ai-slim >= 1.0, < 3",),
    patches=(PatchPoint("pydantic_ai", "Agent.iter", _iter),
             PatchPoint("pydantic_ai.capabilities.instrumentation", "Instrumentation.wrap_model_request",
                        _model_request)),
)


__all__ = ["outcome"]


@dataclass(init=False)
class _Enforcer(AbstractCapability[Any]):
    """Added to every run by the adapter: maps a refused or cut model request to the wrap-up, admits tools."""

    def __init__(self) -> None:
        pass

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        """A run that has stopped, or has no room for one more call, is answered by the wrap-up (streams too)."""
        node = current_run()
        if node is None or node.allows() or node.stop_state is None or not _text_allowed(request_context):
            return request_context
        stop = node.stop(*node.stop_state)
        raise SkipModelRequest(_wrap_up_response(_answers.answer(node, stop), request_context))

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> ModelResponse:
        node = current_run()
        was_cut = node is not None and node.truncated_by_budget
        try:
            response: ModelResponse = await handler(request_context)
        except BudgetExceeded as exc:
            stopped = refused_here(exc)
            if stopped is None or not _text_allowed(request_context):
                raise
            return _wrap_up_response(_answers.answer(stopped, exc), request_context)
        cut = cut_stop(node, was_cut) if _text_allowed(request_context) else None
        if node is not None and cut is not None:  # cut at the output limit the budget set: not the answer
            return _wrap_up_response(_answers.answer(node, cut), request_context, usage=response.usage)
        return response

    def get_wrapper_model(self, model: Any) -> Any:
        return _StreamStop(model)

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        name = str(getattr(call, "tool_name", None) or getattr(tool_def, "name", "tool"))
        try:
            state = tool_begin(ctx, name, args, getattr(call, "tool_call_id", None))
        except BudgetExceeded as exc:
            return f"Not run: {exc.message}"
        try:
            result = await handler(args)
        except BaseException as exc:
            tool_end(state, None, exc)
            raise
        tool_end(state, result)
        return result


def _text_allowed(request_context: Any) -> bool:
    """Whether plain text can be the run's output (not a structured output the text would have to encode)."""
    return _text_allowed_by(getattr(request_context, "model_request_parameters", None))


def _text_allowed_by(params: Any) -> bool:
    mode = getattr(params, "output_mode", "text")
    return bool(getattr(params, "allow_text_output", True)) and mode in ("text", "tool")


def _wrap_up_response(text: str, request_context: Any, usage: Any = None) -> ModelResponse:
    model = getattr(request_context, "model", None)
    extra: dict[str, Any] = {"usage": usage} if usage is not None else {}
    return ModelResponse(parts=[TextPart(content=text)], model_name=getattr(model, "model_name", None),
                         finish_reason="stop", **extra)


class _StreamStop(WrapperModel):
    """A streamed request the budget refuses as its stream opens is answered by a stream of the wrap-up; one whose
    answer is cut at the output limit the budget set ends with the wrap-up in place of the cut text."""

    @asynccontextmanager
    async def request_stream(self, messages: Any, model_settings: Any, model_request_parameters: Any,
                             run_context: Any = None) -> AsyncIterator[StreamedResponse]:
        node = current_run()
        was_cut = node is not None and node.truncated_by_budget
        async with AsyncExitStack() as stack:
            stream: StreamedResponse
            try:
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(messages, model_settings, model_request_parameters, run_context))
            except BudgetExceeded as exc:
                node = refused_here(exc)
                if node is None or not _text_allowed_by(model_request_parameters):
                    raise
                stream = _WrapUpStream(model_request_parameters, _answers.answer(node, exc), self.model_name)
            else:
                if node is not None and not was_cut and _text_allowed_by(model_request_parameters):
                    _end_cut_stream_with_wrap_up(stream, node)
            yield stream


def _end_cut_stream_with_wrap_up(stream: StreamedResponse, node: Any) -> None:
    """When the stream turns out cut at the budget's output limit, its last event brings the wrap-up (after the cut
    text its consumer already got), and the response it settles to (the run's output, its history) is the wrap-up."""
    events = stream._get_event_iterator
    ending: list[ModelResponse] = []

    async def honest() -> AsyncIterator[ModelResponseStreamEvent]:
        async for event in events():
            yield event
        stop = cut_stop(node)
        if stop is None:
            return
        text = _answers.answer(node, stop)
        cut = type(stream).get(stream)
        ending.append(replace(cut, parts=[TextPart(content=text)], finish_reason="stop"))
        yield stream._parts_manager.handle_part(vendor_part_id=None, part=TextPart(content=f"\n\n{text}"))

    def get() -> ModelResponse:
        return replace(ending[0], usage=stream.usage) if ending else type(stream).get(stream)

    try:
        stream._get_event_iterator = honest  # type: ignore[method-assign]
        stream.get = get  # type: ignore[method-assign]
    except Exception:  # noqa: BLE001 - a stream type that takes no attributes: the run still ends with the limit
        log.debug("otel-budget: could not end a cut stream with the wrap-up", exc_info=True)


@dataclass
class _WrapUpStream(StreamedResponse):
    """The wrap-up as a one-part text stream (nothing was sent)."""

    _text: str = ""
    _model_name: str = ""
    _timestamp: datetime = field(default_factory=lambda: datetime.now(timezone.utc), init=False)

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        self.finish_reason = "stop"
        for event in self._parts_manager.handle_text_delta(vendor_part_id=0, content=self._text):
            yield event

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider_name(self) -> str | None:
        return None

    @property
    def provider_url(self) -> str | None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._timestamp

