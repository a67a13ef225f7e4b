"""Other instrumentors of the same model call (OpenInference, OpenLLMetry, OTel genai): one LLM span per request.

Two orders, one span either way:

- Their wrapper sits inside ours (they patched the same choke point first, e.g. OpenInference's
  `OpenAI.request`): it runs under OpenTelemetry's suppress-instrumentation key for the call we span, so it
  passes the call through and our span is the only one. Nothing else is suppressed: the key is set only when
  the function we call is another wrapper.
- Their wrapper runs outside ours (they patched after us, or higher up: OpenLLMetry and OTel genai-openai wrap
  the resource methods): their span is already open when we get control. We adopt it instead of opening a
  sibling: our name, attributes and status go on it, and its owner ends it. When the budget refuses the call,
  their span (which records our exception) is marked as the guardrail that stopped it, not an LLM call.

A wrapper that opens its span only after the call returned (OpenLLMetry's Responses API) fits neither; a thin
wrapper of ours above it enters it under the suppress key (see `openllmetry.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv as sc
from ._patch import PROXY

#: Instrumentation scopes of provider-level LLM instrumentors whose span of a call we adopt (framework-level
#: spans, such as an agent framework's own, are not ours to take over).
PEER_SCOPES = frozenset({
    "openinference.instrumentation.openai",
    "openinference.instrumentation.anthropic",
    "opentelemetry.instrumentation.openai.v1",
    "opentelemetry.instrumentation.openai",
    "opentelemetry.instrumentation.anthropic",
    "opentelemetry.instrumentation.openai_v2",
    "opentelemetry.util.genai.handler",
})


#: GenAI operations of a model call (an agent or tool span of the same instrumentor is not one to adopt).
_LLM_OPERATIONS = frozenset({sc.OP_CHAT, sc.OP_GENERATE_CONTENT, "text_completion"})


def is_wrapper(wrapped: Any) -> bool:
    """Whether the function we are about to call is another instrumentor's wrapper (a wrapt proxy)."""
    return isinstance(wrapped, PROXY)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Tell the instrumentors below to stay quiet for this call (OpenTelemetry's suppress-instrumentation key)."""
    token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        otel_context.detach(token)


class AdoptedSpan:
    """Another instrumentor's open span of this very call, used as ours: it takes our name, attributes, events and
    status; ending it is left to its owner (whose wrapper ends it after ours returns)."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def end(self, end_time: int | None = None) -> None:
        """Its owner ends it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.span, name)


def peer_span() -> AdoptedSpan | None:
    """The open LLM span of another provider-level instrumentor around this call, to adopt (None: open our own)."""
    span = trace.get_current_span()
    if not span.is_recording() or getattr(span, "end_time", 0) is not None:
        return None
    scope = getattr(getattr(span, "instrumentation_scope", None), "name", None)
    if scope not in PEER_SCOPES:
        return None
    attrs = getattr(span, "attributes", None) or {}
    kind = attrs.get(sc.OI_SPAN_KIND)
    is_llm = kind == sc.OI_KIND_LLM if kind is not None else attrs.get(sc.GEN_AI_OPERATION_NAME) in _LLM_OPERATIONS
    return AdoptedSpan(span) if is_llm else None


def mark_refused(operation: str, model: str, reason: str, limit: str | None) -> None:
    """The budget refused this call before it was sent: another instrumentor's open span of it says so."""
    peer = peer_span()
    if peer is None:
        return
    try:
        peer.update_name(f"refused {operation} {model}")
        peer.set_attributes({sc.OI_SPAN_KIND: sc.OI_KIND_GUARDRAIL, sc.STOP_REASON: reason,
                             **({sc.STOP_LIMIT: limit} if limit else {})})
    except Exception:  # noqa: BLE001 - telemetry never breaks the agent
        pass
