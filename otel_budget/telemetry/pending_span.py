"""A model call's span before the call settles (see `PendingSpan`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind

if TYPE_CHECKING:
    from ..model.call import ModelCall


class PendingSpan:
    """A model call's span until the call settles: its SDK span is started then, with the start time and parent
    context (`parent`) of the moment the call began and every attribute at once (one call into the SDK and one
    attribute dict, instead of a start and an update apart). Attributes set meanwhile are kept for it. Only the
    recorder makes and ends it."""

    __slots__ = ("tracer", "call", "extra", "context", "start_time")

    def __init__(self, tracer: Any, call: ModelCall, parent: Context) -> None:
        self.tracer = tracer
        self.call = call
        self.extra: dict[str, Any] | None = None
        self.context = parent
        self.start_time = time.time_ns()

    def set_attribute(self, key: str, value: Any) -> None:
        if self.extra is None:
            self.extra = {}
        self.extra[key] = value

    def start(self, attributes: dict[str, Any]) -> Any:
        """The SDK span, with `attributes` and those set before."""
        if self.extra:
            attributes.update(self.extra)
        call = self.call
        return self.tracer.start_span(f"{call.operation} {call.model}", context=self.context, kind=SpanKind.CLIENT,
                                      attributes=attributes, start_time=self.start_time)
