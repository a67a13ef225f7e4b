"""How a run ended (RunOutcome) and the errors a refused call raises."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    Field,
    computed_field,
)

from .budget import StopReason, Usage, plural, usd
from .paused import PausedRun


class RunOutcome(BaseModel):
    """How a run ended: the reason, the limit that stopped it, what it used, and an honest wrap-up."""

    run_name: str = ""
    stop_reason: StopReason = StopReason.DONE
    limit: str | None = None
    """The Budget field that stopped the run, e.g. `max_usd`; None when no limit did."""
    usage: Usage = Field(default_factory=Usage)
    wrap_up: str = ""
    trace_id: str | None = None
    detail: str = ""
    """One sentence on the stop: the limit, the value it would have reached, what was refused."""
    paused: PausedRun | None = None
    """For `awaiting_approval`: the serializable paused run to give to `otel_budget.resume`."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completed(self) -> bool:
        return self.stop_reason is StopReason.DONE

    def __str__(self) -> str:
        u = self.usage
        why = "done" if self.completed else (f"{self.stop_reason.value} ({self.limit})" if self.limit
                                              else self.stop_reason.value)
        return (f"{self.run_name or 'run'}: {why}; {plural(u.model_calls, 'model call')}, "
                f"{plural(u.tool_calls, 'tool call')}, {u.input_tokens + u.output_tokens:,} tokens, "
                f"{usd(u.cost_usd)}, {u.seconds:.1f} s")


class BudgetExceeded(Exception):
    """Raised before a model or tool call that does not fit the run's budget; the call is not sent.

    `run()` catches it for its own run tree and closes the run gracefully.
    """

    content_free = True  # its message is the library's own stop detail: telemetry may carry it (model/_text.py)

    def __init__(
        self, reason: StopReason, message: str, *, limit: str | None = None, outcome: RunOutcome | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.limit = limit
        self.outcome = outcome if outcome is not None else RunOutcome(stop_reason=reason, limit=limit)
        self.message = message
        self.run_id: int | None = None


class UnknownPriceError(LookupError):
    """A model has no known price while the run has a money cap; the call is not sent."""

    content_free = True  # its message names a model and what to do, nothing a user or a model wrote
