"""Going on with a paused run after a person's decision, and pausing before a gated tool call."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags
from pydantic import ValidationError

from ..model.budget import Budget, StopReason, plural
from ..telemetry import semconv as sc
from . import config
from .run import Run, current_run

if TYPE_CHECKING:
    from .run import RunNode
from ..model.paused import PausedRun, PendingCall, _pending
from ..model.trust import InvalidRunState
from . import trust
from .approval import ApprovalState, describe_call


def resume(
    paused: PausedRun | str | Mapping[str, Any],
    approved: bool | None,
    *,
    budget: Budget | None = None,
    by: str | None = None,
) -> ResumedRun:
    """Go on with a paused run after a person's decision: `with otel_budget.resume(paused, approved=True) as run:`.

    The run keeps the quota it used (a run paused at 20 of 25 steps has 5 left), its trace (the new run span is
    a child of the paused one) and its decisions. Approval covers exactly the pending tool with the same
    arguments, once; a rejection ends the run with `denied`, or, when the policy names an `alternative`, goes
    on with `run.rejection` as the text to answer the call with. `budget` replaces the saved limits (pass it
    to keep a policy's `when` predicate across processes); time spent waiting for the decision is not run time.
    `approved=None` (a framework resumed without a decision): nothing is granted or denied, the call pauses again.
    A run paused at a limit (`Budget(on_limit="pause")`, pending kind "limit") goes on under `budget`'s limits with
    the quota used counted, so only larger limits let it send more; a rejection ends it with the limit's reason.
    """
    if not isinstance(paused, PausedRun):
        try:
            paused = PausedRun.model_validate_json(paused) if isinstance(paused, str) else PausedRun.model_validate(
                paused)
        except ValidationError as exc:
            given = f"{paused[:40]!r}" if isinstance(paused, str) else type(paused).__name__
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InvalidRunState(
                f"resume() needs the paused run: run.outcome.paused, or its JSON (paused.model_dump_json()); "
                f"{given} is not that ({plural(exc.error_count(), 'problem')}; the first: "
                f"{where + ': ' if where else ''}{first['msg']})"
            ) from None
    paused = trust.check(paused)
    if budget is None:
        budget = paused.make_budget()
    elif budget.approve is None and paused.policy is not None:
        budget = budget.model_copy(update={"approve": paused.policy})
    if "on_limit" not in budget.model_fields_set and paused.budget.get("on_limit") == "pause":
        budget = budget.model_copy(update={"on_limit": "pause"})  # a run that pauses at limits keeps doing so
    return ResumedRun(paused, approved, budget, by)


class ResumedRun(Run):
    """A run that goes on from a `PausedRun` (see `resume`)."""

    def __init__(self, paused: PausedRun, approved: bool | None, budget: Budget, by: str | None) -> None:
        super().__init__(paused.run_name, budget)
        self.resumed_from = paused
        self.approved = approved
        self.by = by

    @property
    def state(self) -> Any:
        """What the code saved with `run.checkpoint(...)` before the pause."""
        return self.resumed_from.state

    @property
    def pending(self) -> PendingCall | None:
        return self.resumed_from.pending

    @property
    def rejection(self) -> str | None:
        """After a rejection: the text to answer the rejected call with (None when approved)."""
        return self.resumed_from.rejection_message() if self.approved is False else None

    def _prepare(self, node: RunNode) -> dict[str, Any]:
        p = self.resumed_from
        config.get().telemetry.resumed(p.run_name)  # it waits no more; counted in runs_total when it ends
        node.carry_over(p.usage)
        node.tools_requested.update(p.tools_requested)
        node.tools_executed.update(p.tools_executed)
        node.pending_tools.update(p.pending_tools)
        state = node.approval
        if state is None:
            state = node.approval = ApprovalState()
        state.load(p)
        attrs: dict[str, Any] = {}
        if self.approved is not None:
            attrs[sc.APPROVAL_DECISION] = "approved" if self.approved else "denied"
        if p.pending is not None:
            attrs[sc.APPROVAL_TOOL] = p.pending.tool if p.pending.kind == "tool" else p.pending.operation
            state.decide(node, p.pending, self.approved)
        if self.by:
            attrs[sc.APPROVAL_BY] = self.by
        if p.paused_at:
            attrs[sc.APPROVAL_WAIT_SECONDS] = max(0.0, time.time() - p.paused_at)
        node.allows()  # re-check the limits now: a run with nothing left stops before its first call
        options: dict[str, Any] = {"attributes": attrs}
        if p.trace_id and p.span_id:
            attrs[sc.RESUMED_FROM] = p.span_id
            try:
                ctx = SpanContext(int(p.trace_id, 16), int(p.span_id, 16), is_remote=True,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED))
            except ValueError:
                return options
            options["links"] = [Link(ctx)]
            if node.parent is None:
                options["context"] = trace.set_span_in_context(NonRecordingSpan(ctx))
        return options


def needs_approval(tool: str, arguments: Any, node: RunNode | None = None) -> bool:
    """Whether a tool call in the current run needs a person's approval now (for a framework's own
    `needs_approval` hook); consumes nothing."""
    node = node or current_run()
    if node is None or node.approval is None:
        return False
    return node.approval.needs_approval(node, tool, arguments)


def pause(tool: str, arguments: Any, call_id: str | None = None, *, state: Any = None,
          node: RunNode | None = None) -> None:
    """Mark the current run as paused on this call (a framework paused it itself, e.g. an interruption):
    the run then ends with `awaiting_approval` and `outcome.paused` carries `state` (e.g. the framework's
    serialized run state)."""
    node = node or current_run()
    if node is None:
        return
    if node.approval is None:
        node.approval = ApprovalState()
    op = node.approval.operation(node, tool, arguments) or tool
    with node.approval.lock:
        node.approval.pending = _pending(tool, arguments, call_id, op)
    if state is not None:
        node.saved_state = state
    if node.stop_state is None:
        node.stop_state = (StopReason.AWAITING_APPROVAL, None,
                           f"{describe_call(tool, arguments)} needs a person's approval; the run paused before it ran.")
