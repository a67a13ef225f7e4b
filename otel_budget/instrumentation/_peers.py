"""Other instrumentors of the same model call (OpenInference, OpenLLMetry, OTel genai-openai): one LLM span per
request, with any number of them loaded, in any order (as `opentelemetry-instrument` loads every one installed).

Where their wrappers sit: OpenInference wraps the client's `request`, next to ours (inside or outside it, by
instrument order); OpenLLMetry and OTel genai-openai wrap the resource methods (`chat.completions.create` /
`parse`, OpenLLMetry also `responses.create` / `parse`), always outside ours. OpenInference and OpenLLMetry
read OpenTelemetry's suppress-instrumentation key once, on entry, and then pass the call through; genai-openai
never reads it.

Three rules make one span of the many:

- A gate above them all. On each resource method that makes calls we span and holds another instrumentor's
  wrapper, a thin wrapper of ours sits on top and enters the call under the suppress key (`gate`), so the
  wrappers below that honour it pass the call through: OpenLLMetry at that level, OpenInference at the client
  level whichever side of ours it is. Our request wrapper clears the key again for the HTTP request itself
  (`sending`), so HTTP client spans are kept. `instrumentors.py` puts the gates there and keeps them on top:
  they are lifted around every other instrumentor's `instrument()` / `uninstrument()` and put back after it, so
  a peer that comes later goes under them, and a peer's unwrap (which takes off whatever wrapper is on top)
  finds its own.
- A wrapper inside ours (OpenInference instrumented first, wrapping `OpenAI.request`) is entered under the key
  too (`sending`).
- A span still open around ours is adopted (`telemetry.peers`): our name, attributes and status go on it and
  its owner ends it. With the gate that is only genai-openai's, which ignores the key; with no gate, any
  instrumentor outside ours. When the budget refuses the call, that span (which records our exception) is
  marked as the guardrail that stopped it, not an LLM call.

So whichever peers are loaded, the call has exactly one LLM span: ours, or a peer's carrying ours; and a refused
call has none (at most a guardrail span). OpenLLMetry's Responses spans, opened only after the call returned,
are covered by the gate as well. Adopting the outermost peer's span and quieting the rest instead would need a
hook between every two peers (genai-openai cannot be quieted), so the gate is the one place. The HTTP request is
suppressed only under OpenInference instrumented before us: its quiet call goes straight to the transport.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context

from ._patch import PROXY

_SUPPRESS = otel_context._SUPPRESS_INSTRUMENTATION_KEY
#: Set while a gate of ours holds the suppress key (not set by the caller, who may have set it themselves).
_GATED: ContextVar[bool] = ContextVar("otel_budget_gated", default=False)


class _WhileGated:
    """The suppress key's value that a gate puts: true only while that gate is on the stack. genai-openai attaches
    its span's context on entry and detaches it when a stream ends, which restores the context it found (the
    gate's) after the gate has returned: that context must not keep everything suppressed."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return _GATED.get()


_ON = _WhileGated()


def is_wrapper(wrapped: Any) -> bool:
    """Whether the function we are about to call is another instrumentor's wrapper (a wrapt proxy)."""
    return isinstance(wrapped, PROXY)


def _foreign_inside(wrapped: Any) -> bool:
    """Whether another instrumentor's wrapper is inside ours: a wrapt proxy that is not one of our own patches left
    behind by an earlier `instrument()` (those pass every call through untouched, see _patch.py)."""
    for _ in range(16):
        if not isinstance(wrapped, PROXY):
            return False
        generation = getattr(getattr(wrapped, "_self_wrapper", None), "otel_budget_generation", None)
        if generation is None or generation.live:
            return True
        wrapped = getattr(wrapped, "__wrapped__", None)
    return True


def touches(wrapped: Any) -> bool:
    """Whether our request wrapper must send through `sending`: a wrapper inside ours, or a gate of ours above."""
    return (isinstance(wrapped, PROXY) and _foreign_inside(wrapped)) or _GATED.get()


@contextlib.contextmanager
def sending(wrapped: Any) -> Iterator[None]:
    """Around the send of a call we span: the suppress key on for another instrumentor's wrapper inside ours, off
    for the HTTP request itself when only a gate of ours had put it on."""
    gated = _GATED.set(False)
    token = otel_context.attach(otel_context.set_value(_SUPPRESS, True)) if _foreign_inside(wrapped) else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)
        _GATED.reset(gated)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The suppress key on, unless it already is (another gate above, or the caller's own)."""
    if otel_context.get_value(_SUPPRESS):
        yield
        return
    token = otel_context.attach(otel_context.set_value(_SUPPRESS, _ON))
    gated = _GATED.set(True)
    try:
        yield
    finally:
        _GATED.reset(gated)
        otel_context.detach(token)


def gate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Our wrapper above other instrumentors' on a resource method: they run under the suppress key."""
    if not is_wrapper(wrapped):
        return wrapped(*args, **kwargs)
    with _quiet():
        return wrapped(*args, **kwargs)


async def gate_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not is_wrapper(wrapped):
        return await wrapped(*args, **kwargs)
    with _quiet():
        return await wrapped(*args, **kwargs)
