"""Another instrumentor's span of the same model call: adopted, so each request has one LLM span."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from . import semconv as sc

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


def peer_span(ctx: Context | None = None) -> AdoptedSpan | None:
    """The open LLM span of another provider-level instrumentor around this call, to adopt (None: open our own);
    `ctx`: the current context, when the caller has read it already."""
    span = trace.get_current_span(ctx)
    scope = getattr(getattr(span, "instrumentation_scope", None), "name", None)
    if scope not in PEER_SCOPES:  # first: the common case (our run's span, or none) ends here
        return None
    if not span.is_recording() or getattr(span, "end_time", 0) is not None:
        return None
    attrs = getattr(span, "attributes", None) or {}
    kind = attrs.get(sc.OI_SPAN_KIND)
    is_llm = kind == sc.OI_KIND_LLM if kind is not None else attrs.get(sc.GEN_AI_OPERATION_NAME) in sc.MODEL_OPERATIONS
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
