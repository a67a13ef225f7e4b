"""Spans and metrics from runs, model calls and tool calls. Names come from `semconv` only.

Everything here is best effort: a telemetry failure is logged at debug level and never reaches the agent.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from opentelemetry import metrics, trace
from opentelemetry.context import get_current as current_context
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._version import __version__
from ..model._text import error_detail
from ..model.budget import StopReason
from ..model.outcome import RunOutcome
from ..model.signatures import arguments_signature, result_signature
from . import openinference as twins
from . import semconv as sc
from .messages import capture_mode
from .peers import peer_span
from .pending_span import PendingSpan
from .run_names import RunNames

if TYPE_CHECKING:
    from ..model.call import ModelCall

log = logging.getLogger(__name__)


_METRIC_ATTRS_MAX = 256


class _MetricAttrs(NamedTuple):
    """A call kind's metric attributes: never mutated once built (the SDK keeps what it is given)."""

    base: dict[str, Any]
    input: dict[str, Any]
    output: dict[str, Any]
    by_modality: dict[str, Any]
    cost: dict[str, Any]


class RunView(Protocol):
    """What the recorder reads of a run (the core's RunNode): telemetry sits below the decisions it reports."""

    @property
    def name(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def conversation_id(self) -> str | None: ...
    @property
    def outcome(self) -> RunOutcome | None: ...
    @property
    def unenforced(self) -> int: ...
    @property
    def tool_calls_refused(self) -> int: ...
    @property
    def completion(self) -> tuple[bool, Any] | None: ...
    def span_limits(self) -> dict[str, float]: ...
    def utilization(self) -> dict[str, float]: ...
    def utilization_max(self) -> float: ...


class Telemetry:
    """The tracer and the metric instruments of one `instrument()` call."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None,
                 openinference: bool | None = None) -> None:
        self.tracer = trace.get_tracer(sc.TRACER_NAME, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(sc.TRACER_NAME, __version__, meter_provider=meter_provider)
        self.latest = latest_gen_ai_metrics()
        #: Whether spans also carry the OpenInference twins (Arize AX, Phoenix before 15.10).
        self.openinference = twins.from_env() if openinference is None else bool(openinference)
        #: The cache-write attribute: the released name, or the newest one when the opt-in asks for it.
        self.cache_write_attr = (sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS if self.latest
                                 else sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS)
        if self.latest:
            self._latest_instruments(meter)
        else:
            self.token_usage = meter.create_histogram(
                sc.METRIC_TOKEN_USAGE,
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=list(sc.TOKEN_BUCKETS),
            )
        self.duration = meter.create_histogram(
            sc.METRIC_INFERENCE_DURATION if self.latest else sc.METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(sc.DURATION_BUCKETS),
        )
        self.cost = meter.create_counter(sc.METRIC_COST, description="Money spent on model calls, in USD.")
        self.runs = meter.create_counter(sc.METRIC_RUNS, description="Finished runs by stop reason.")
        #: +1 when a run pauses for a decision, -1 when a paused run is resumed (in this process or another: summed
        #: by run_name across processes it is the number of runs waiting now).
        self.awaiting = meter.create_up_down_counter(
            sc.METRIC_RUNS_AWAITING_APPROVAL, description="Runs paused for a person's decision, not yet resumed."
        )
        self.near_cap = meter.create_counter(sc.METRIC_RUNS_NEAR_CAP, description="Runs that crossed Budget.near.")
        self.fail_open = meter.create_counter(
            sc.METRIC_LEDGER_FAIL_OPEN, description="Calls let through while the shared ledger was unreachable."
        )
        #: Metric attributes per (operation, provider, model, response model, server, error type, run name).
        self._metric_attrs: dict[tuple[Any, ...], _MetricAttrs] = {}
        self.names = RunNames()
        self._lock = threading.Lock()
        meter.create_observable_gauge(
            sc.METRIC_RUN_UTILIZATION,
            callbacks=[self.names.observe],
            description="Highest utilization (used / limit) among the active runs of a name, per dimension.",
        )

    def _latest_instruments(self, meter: Any) -> None:
        """The newest GenAI token metrics: per-call histograms and usage counters by modality."""
        buckets = list(sc.TOKEN_BUCKETS)
        self.op_input = meter.create_histogram(sc.METRIC_OPERATION_INPUT_TOKENS, unit="{token}",
                                               description="Input tokens per inference operation.",
                                               explicit_bucket_boundaries_advisory=buckets)
        self.op_output = meter.create_histogram(sc.METRIC_OPERATION_OUTPUT_TOKENS, unit="{token}",
                                                description="Output tokens per inference operation.",
                                                explicit_bucket_boundaries_advisory=buckets)
        self.usage_counters = [
            (meter.create_counter(name, unit="{token}", description=text), field)
            for name, field, text in (
                (sc.METRIC_USAGE_INPUT_TOKENS, "input_tokens", "Input tokens used."),
                (sc.METRIC_USAGE_OUTPUT_TOKENS, "output_tokens", "Output tokens used, reasoning included."),
                (sc.METRIC_USAGE_CACHE_READ_TOKENS, "cache_read", "Input tokens read from a provider cache."),
                (sc.METRIC_USAGE_CACHE_WRITE_TOKENS, "cache_write", "Input tokens written to a provider cache."),
                (sc.METRIC_USAGE_REASONING_TOKENS, "reasoning", "Output tokens used for reasoning."),
            )
        ]

    def _record_tokens(self, u: Any, metric: _MetricAttrs) -> None:
        if not self.latest:
            self.token_usage.record(u.input_tokens, metric.input)
            self.token_usage.record(u.output_tokens, metric.output)
            return
        self.op_input.record(u.input_tokens, metric.base)
        self.op_output.record(u.output_tokens, metric.base)
        for counter, field in self.usage_counters:
            value = getattr(u, field)
            if value:
                counter.add(value, metric.by_modality)

    def _call_metric_attrs(self, call: ModelCall, error_type: str | None, run_name: str | None) -> _MetricAttrs:
        """The metric attribute sets of a call's kind, built once and kept (bounded): the same few recur."""
        base: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: call.operation,
            sc.GEN_AI_PROVIDER_NAME: call.provider,
            sc.GEN_AI_REQUEST_MODEL: call.model,
        }
        if call.response_model:
            base[sc.GEN_AI_RESPONSE_MODEL] = call.response_model
        if call.server is not None:
            base[sc.SERVER_ADDRESS] = call.server[0]
            if call.server[1] is not None:
                base[sc.SERVER_PORT] = call.server[1]
        if error_type is not None:
            base[sc.ERROR_TYPE] = error_type
        cost = {sc.GEN_AI_REQUEST_MODEL: call.model, sc.GEN_AI_PROVIDER_NAME: call.provider,
                sc.LABEL_RUN_NAME: self.names.label(run_name)}
        metric = _MetricAttrs(base, {**base, sc.GEN_AI_TOKEN_TYPE: "input"}, {**base, sc.GEN_AI_TOKEN_TYPE: "output"},
                              {**base, sc.GEN_AI_TOKEN_MODALITY: sc.MODALITY_UNKNOWN}, cost)
        with self._lock:
            if len(self._metric_attrs) >= _METRIC_ATTRS_MAX:
                self._metric_attrs.clear()
            self._metric_attrs[(call.operation, call.provider, call.model, call.response_model, call.server,
                                error_type, run_name)] = metric
        return metric

    # --- runs -------------------------------------------------------------------------------------------

    def start_run(self, node: RunView, context: Any = None, links: Any = None, attributes: Any = None) -> Any:
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
            sc.GEN_AI_AGENT_NAME: node.name,
            sc.RUN_DEPTH: node.depth,
        }
        if self.openinference:
            attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_AGENT
        if node.conversation_id is not None:
            attrs[sc.GEN_AI_CONVERSATION_ID] = node.conversation_id
            if self.openinference:
                attrs[sc.OI_SESSION_ID] = node.conversation_id
        for dim, limit in node.span_limits().items():
            attrs[sc.LIMIT_PREFIX + dim] = limit
        if attributes:
            attrs.update(attributes)
        span = self.tracer.start_span(
            f"{sc.OP_INVOKE_AGENT} {node.name}", context=context, kind=SpanKind.INTERNAL, attributes=attrs, links=links
        )
        self.names.started(node)
        return span

    def end_run(self, node: RunView, span: Any, wrap_up: str = "") -> None:
        """Record a finished run; `wrap_up` is the text for the span (the template when content is not captured)."""
        label = self.names.ended(node)
        outcome = node.outcome
        if outcome is None:
            return
        reason = outcome.stop_reason.value
        try:
            usage = outcome.usage
            used = {
                "steps": usage.model_calls,
                "tool_calls": usage.tool_calls,
                "seconds": usage.seconds,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
                "usd": _money(usage.cost_usd),
            }
            attrs: dict[str, Any] = {sc.STOP_REASON: reason, sc.UNPRICED_CALLS: usage.unpriced_calls}
            for dim, value in used.items():
                attrs[sc.USED_PREFIX + dim] = value
            attrs[sc.UTILIZATION] = node.utilization_max()
            if outcome.limit:
                attrs[sc.STOP_LIMIT] = outcome.limit
            if node.unenforced:
                attrs[sc.LEDGER_UNENFORCED_CALLS] = node.unenforced
            if node.tool_calls_refused:
                attrs[sc.TOOL_CALLS_REFUSED] = node.tool_calls_refused
            if wrap_up:
                attrs[sc.WRAP_UP] = wrap_up
            if node.completion is not None and node.completion[1] is not None:
                evidence = node.completion[1]
                attrs[sc.COMPLETION_EVIDENCE] = (evidence if isinstance(evidence, (str, bool, int, float))
                                                 else str(evidence))
            span.set_attributes(attrs)
            if outcome.stop_reason is not StopReason.DONE:
                event = {sc.STOP_REASON: reason, sc.STOP_DETAIL: outcome.detail}
                if outcome.limit:
                    event[sc.STOP_LIMIT] = outcome.limit
                span.add_event(sc.EVENT_STOP, event)
            if outcome.stop_reason is StopReason.ERROR:
                span.set_status(Status(StatusCode.ERROR, outcome.detail or "error"))
            if outcome.stop_reason is StopReason.AWAITING_APPROVAL:  # not finished: it waits (see `resumed`)
                self.awaiting.add(1, {sc.LABEL_RUN_NAME: label})
            else:
                self.runs.add(1, {sc.LABEL_RUN_NAME: label, sc.LABEL_STOP_REASON: reason})
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: could not record the run span", exc_info=True)
        finally:
            span.end()

    def resumed(self, name: str) -> None:
        """A paused run of `name` goes on after a decision: it no longer waits (it is counted when it ends)."""
        try:
            self.awaiting.add(-1, {sc.LABEL_RUN_NAME: self.names.label(name)})
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: could not record a resume", exc_info=True)

    def crossed_near(self, node: RunView) -> None:
        self.near_cap.add(1, {sc.LABEL_RUN_NAME: self.names.label(node.name)})

    # --- model calls ------------------------------------------------------------------------------------

    def start_call(self, call: ModelCall) -> Any:
        """The span of a call that begins now: another instrumentor's span of it (adopted), else a PendingSpan."""
        parent = current_context()  # read once: the peer's span is looked for in it, and ours starts in it
        peer = peer_span(parent)  # another instrumentor's span of this very call: one LLM span, ours in content
        if peer is not None:
            peer.update_name(f"{call.operation} {call.model}")
            peer.set_attributes(self._call_start_attrs(call))
            return peer
        return PendingSpan(self.tracer, call, parent)

    def _call_start_attrs(self, call: ModelCall) -> dict[str, Any]:
        """What a call's span says of its request."""
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: call.operation,
            sc.GEN_AI_PROVIDER_NAME: call.provider,
            sc.GEN_AI_REQUEST_MODEL: call.model,
        }
        if call.max_output_tokens is not None:
            attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.max_output_tokens
        if call.params:
            attrs.update(call.params)
        if call.server is not None:
            attrs[sc.SERVER_ADDRESS] = call.server[0]
            if call.server[1] is not None:
                attrs[sc.SERVER_PORT] = call.server[1]
        if call.conversation_id is not None:
            attrs[sc.GEN_AI_CONVERSATION_ID] = call.conversation_id
        if self.openinference:
            attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_LLM
            attrs[sc.OI_LLM_PROVIDER] = sc.OI_PROVIDERS.get(call.provider, call.provider)
            attrs[sc.OI_INVOCATION_PARAMETERS] = twins.invocation_json(call)
            if call.conversation_id is not None:
                attrs[sc.OI_SESSION_ID] = call.conversation_id
        return attrs

    def end_call(self, call: ModelCall, span: Any, duration: float, run_name: str | None,
                 capture: bool = False) -> None:
        """Record a settled call; a failed one by its error's type and HTTP status (its message only with `capture`)."""
        try:
            u = call.usage
            oi = self.openinference
            pending = type(span) is PendingSpan
            attrs = self._call_start_attrs(call) if pending else {}
            attrs[sc.COST_SOURCE] = call.cost_source
            if call.turn:
                attrs[sc.TURN] = call.turn
            if call.response_model:
                attrs[sc.GEN_AI_RESPONSE_MODEL] = call.response_model
            if call.response_id:
                attrs[sc.GEN_AI_RESPONSE_ID] = call.response_id
            if call.finish_reasons:
                attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = list(call.finish_reasons)
            if u is not None:
                attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = u.input_tokens
                attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = u.output_tokens
                if u.cache_read:
                    attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = u.cache_read
                if u.cache_write:
                    attrs[self.cache_write_attr] = u.cache_write
                if u.reasoning:
                    attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = u.reasoning
            if call.usage_estimated:
                attrs[sc.USAGE_ESTIMATED] = True
            if call.cost_usd is not None:
                attrs[sc.COST_USD] = _money(call.cost_usd)
            if oi:
                twins.call_attributes(attrs, call)
            if call.tool_calls:
                attrs[sc.ACTIONS] = [f"{name}:{arguments_signature(args)}" for name, args, *_ in call.tool_calls]
            event = None
            if call.capture is not None:
                on_span, as_event = capture_mode()
                if on_span:
                    attrs.update(call.capture)
                if as_event:
                    event = call.capture
            error_type = None
            if call.error is not None:
                attrs[sc.ERROR_TYPE] = error_type = type(call.error).__name__
            if pending:  # the SDK span, made now with every attribute at once
                span = span.start(attrs)
            else:
                span.set_attributes(attrs)
            if event is not None:
                span.add_event(sc.EVENT_INFERENCE_DETAILS, event)
            if call.error is not None:
                span.set_status(Status(StatusCode.ERROR, error_detail(call.error, capture)))
            metric = self._metric_attrs.get((call.operation, call.provider, call.model, call.response_model,
                                             call.server, error_type, run_name))
            if metric is None:
                metric = self._call_metric_attrs(call, error_type, run_name)
            self.duration.record(duration, metric.base)
            if u is not None:
                self._record_tokens(u, metric)
            if call.cost_usd:
                self.cost.add(call.cost_usd, metric.cost)
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: could not record the call span", exc_info=True)
        finally:
            try:
                if type(span) is PendingSpan:  # failed before the span was made: made now, never lost
                    span = span.start({sc.GEN_AI_OPERATION_NAME: call.operation,
                                       sc.GEN_AI_PROVIDER_NAME: call.provider, sc.GEN_AI_REQUEST_MODEL: call.model})
                span.end()
            except Exception:  # noqa: BLE001 - a tracer that fails never breaks the agent's call
                log.debug("otel-budget: could not end the call span", exc_info=True)

    # --- tools ------------------------------------------------------------------------------------------

    def start_tool(self, name: str, call_id: str | None, arguments: Any, capture: bool,
                   description: str | None = None) -> Any:
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: name,
            sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
        }
        oi = self.openinference
        if oi:
            attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_TOOL
            attrs[sc.OI_TOOL_NAME] = name
        if description:
            attrs[sc.GEN_AI_TOOL_DESCRIPTION] = description
            if oi:
                attrs[sc.OI_TOOL_DESCRIPTION] = description
        if call_id:
            attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id
        try:
            attrs[sc.TOOL_ARGUMENTS_SIGNATURE] = arguments_signature(arguments)
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: could not sign tool arguments", exc_info=True)
        if capture:
            text = _json(arguments)
            attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = text
            if oi:
                attrs[sc.OI_INPUT_VALUE] = text
        return self.tracer.start_span(f"{sc.OP_EXECUTE_TOOL} {name}", kind=SpanKind.INTERNAL, attributes=attrs)

    def end_tool(self, span: Any, result: Any, error: BaseException | None, capture: bool, cost: float) -> None:
        try:
            if cost:
                span.set_attribute(sc.COST_USD, cost)
            if error is None:
                span.set_attribute(sc.TOOL_RESULT_SIGNATURE, result_signature(result))
            if capture and error is None:
                text = _json(result)
                span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, text)
                if self.openinference:
                    span.set_attribute(sc.OI_OUTPUT_VALUE, text)
            if error is not None:
                span.set_attribute(sc.ERROR_TYPE, type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, error_detail(error, capture)))
        finally:
            span.end()


def latest_gen_ai_metrics() -> bool:
    """Whether OTEL_SEMCONV_STABILITY_OPT_IN asks for the newest GenAI metric names."""
    value = os.environ.get(sc.ENV_SEMCONV_OPT_IN, "")
    return sc.OPT_IN_GEN_AI_LATEST in {v.strip() for v in value.split(",")}


def _money(usd: float) -> float:
    """A cost without float noise (0.00030000000000000014 -> 0.0003)."""
    return round(usd, 10)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except Exception:  # noqa: BLE001
        return repr(value)
