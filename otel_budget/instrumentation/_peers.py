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

from ._patch import PROXY

#: GenAI operations of a model call (an agent or tool span of the same instrumentor is not one to adopt).


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


