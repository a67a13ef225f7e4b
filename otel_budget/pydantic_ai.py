"""pydantic-ai: the budget as a capability, given the way pydantic-ai takes per-run settings.

    from pydantic_ai import Agent
    from otel_budget.pydantic_ai import BudgetLimits, outcome

    agent = Agent(model, name="researcher")
    result = await agent.run("...", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=20, max_usd=0.50))])
    result.output            # on a stop: the wrap-up (for a text output)
    outcome(result)          # the RunOutcome: stop_reason, limit, usage, wrap_up

`Agent(model, capabilities=[BudgetLimits(...)])` makes it the agent's budget for every run. With a structured
output type (no text allowed) a stop raises `otel_budget.BudgetExceeded` from `agent.run()`, after the run
closed; its `.outcome` is the final RunOutcome. See `otel_budget.instrumentation.pydantic_ai` for the details.
"""

from __future__ import annotations

import logging
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

from .budget import Budget, BudgetExceeded
from .instrumentation import pydantic_ai as _adapter
from .instrumentation.pydantic_ai import outcome
from .run import current_run

__all__ = ["BudgetLimits", "outcome"]

log = logging.getLogger(__name__)


@dataclass(init=False)
class BudgetLimits(AbstractCapability[Any]):
    """The run's budget as a pydantic-ai capability, per run (`agent.run(..., capabilities=[...])`) or per agent."""

    budget: Budget
    """The budget of each run that carries this capability (a nested agent run draws from its parents too)."""

    def __init__(self, budget: Budget) -> None:
        if not isinstance(budget, Budget):
            raise TypeError(f"BudgetLimits(budget) takes an otel_budget.Budget, not {type(budget).__name__}")
        self.budget = budget

    @property
    def otel_budget(self) -> Budget:
        """The budget under the key the framework adapters read (`budget` by another name)."""
        return self.budget


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
        raise SkipModelRequest(_wrap_up_response(_adapter.answer(node, stop), request_context))

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> ModelResponse:
        node = current_run()
        was_cut = node is not None and node.truncated_by_budget
        try:
            response: ModelResponse = await handler(request_context)
        except BudgetExceeded as exc:
            stopped = _adapter.refused_here(exc)
            if stopped is None or not _text_allowed(request_context):
                raise
            return _wrap_up_response(_adapter.answer(stopped, exc), request_context)
        if (node is not None and not was_cut and node.truncated_by_budget and node.stop_state is not None
                and _text_allowed(request_context)):
            stop = node.stop(*node.stop_state)  # cut at the output limit the budget set: not the answer
            return _wrap_up_response(_adapter.answer(node, stop), request_context, usage=response.usage)
        return response

    def get_wrapper_model(self, model: Any) -> Any:
        return _StreamStop(model)

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        name = str(getattr(call, "tool_name", None) or getattr(tool_def, "name", "tool"))
        try:
            state = _adapter.tool_begin(ctx, name, args, getattr(call, "tool_call_id", None))
        except BudgetExceeded as exc:
            return f"Not run: {exc.message}"
        try:
            result = await handler(args)
        except BaseException as exc:
            _adapter.tool_end(state, None, exc)
            raise
        _adapter.tool_end(state, result)
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
                node = _adapter.refused_here(exc)
                if node is None or not _text_allowed_by(model_request_parameters):
                    raise
                stream = _WrapUpStream(model_request_parameters, _adapter.answer(node, exc), self.model_name)
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
        if not node.truncated_by_budget or node.stop_state is None:
            return
        text = _adapter.answer(node, node.stop(*node.stop_state))
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
