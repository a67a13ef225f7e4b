"""How a run stops: the stop and its pause at a limit, the refusals, the checks every call passes first (run
open, depth, time, pending stops), and the outcome the stop carries."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from ..model.budget import LIMITS, StopReason, Usage
from ..model.outcome import BudgetExceeded, RunOutcome
from ..model.paused import PendingCall
from . import ledger as lg
from .approval import ApprovalState
from .node_state import _DIM_REASON, NodeState

if TYPE_CHECKING:
    from typing_extensions import Self

#: Stops recorded between calls that refuse the next model or tool call.
_GATED_STOPS = (StopReason.REPEAT, StopReason.STALLED, StopReason.TOOL_CALLS, StopReason.AWAITING_APPROVAL,
                StopReason.DENIED)
#: A finished run needs no wrap-up, and a paused one goes on later: neither spends a call on a summary.
_NO_MODEL_WRAP_UP = (StopReason.DONE, StopReason.AWAITING_APPROVAL)
#: Headroom at or below which an account counts as used up (a step or a tool call needs a whole one).
_EXHAUSTED_AT = {"steps": 0.5, "tool_calls": 0.5}
#: The output limit of the model call that writes a stopped run's wrap-up.
_WRAP_UP_MAX_TOKENS = 300


class NodeStops(NodeState):
    """The run's stops: recording one (up the chain to the run whose limit caused it), the gates, the outcome."""

    def stop(
        self, reason: StopReason, limit: str | None, detail: str, *, by: Self | None = None, pausable: bool = True
    ) -> BudgetExceeded:
        """Record that the run stops (the first stop recorded wins) and return the BudgetExceeded to raise.

        `by` is the ancestor whose limit caused the stop: it and every run in between record it too, so a run
        whose budget refused work never ends `done`. When that run's budget says `on_limit="pause"`, a stop at
        one of its own limits is a pause (`awaiting_approval`, pending kind "limit") instead.
        """
        if pausable and self.stop_state is None:
            reason, detail = self._pause_at_limit(reason, limit, detail, by or self)
        if self.stop_state is None:
            self.stop_state = (reason, limit, detail)
        if by is not None and by is not self:
            self._stop_up_to(by, (reason, limit, f"in run '{self.name}': {detail}"))
        exc = BudgetExceeded(reason, detail, limit=limit, outcome=self.snapshot(reason, limit, detail))
        exc.run_id = self.id
        exc.run_path = self.path  # type: ignore[attr-defined]
        return exc

    def _pause_at_limit(self, reason: StopReason, limit: str | None, detail: str, owner: Self) -> tuple[
            StopReason, str]:
        """A stop at one of `owner`'s own limits under `on_limit="pause"`: record the limit as what the run waits
        on and return (`awaiting_approval`, detail); any other stop is returned as it is."""
        if (limit not in LIMITS or LIMITS[limit][1] is not reason or owner.budget.on_limit != "pause"
                or getattr(owner.budget, limit, None) is None):
            return reason, detail
        dim = LIMITS[limit][0]
        used = owner.elapsed() if dim == "seconds" else owner.account.used[dim]
        cap = float(getattr(owner.budget, limit))
        if self.approval is None:
            self.approval = ApprovalState()
        with self.approval.lock:
            self.approval.pending = PendingCall(kind="limit", tool="", operation=limit, limit=limit,
                                                used=round(used, 10), cap=cap)
        return StopReason.AWAITING_APPROVAL, (f"{detail.rstrip('.')}; the run paused for a person's decision "
                                              f"(on_limit=\"pause\"): resume it with a larger {limit} to go on.")

    def _stop_up_to(self, owner: Self, state: tuple[StopReason, str | None, str]) -> None:
        """Record `state` on every ancestor up to `owner` that has no stop yet."""
        for node in self.chain[1:]:
            if node.stop_state is None:
                node.stop_state = state
            if node is owner:
                return

    def _refuser(self, refusal: lg.Refusal, shared: bool) -> Self:
        """The run whose limit refused: the one holding the refusing account, or the outermost naming the scope."""
        if shared:
            named = [n for n in self.chain if any(s is not None and s.name == refusal.scope
                                                  for s in (n.budget.scope, *n.extra_scopes))]
            return named[-1] if named else self
        return next((n for n in self.chain if n.account is refusal.account), self)

    def _exhausted(self, dim: str) -> Self:
        """The nearest run of the chain whose own account is used up on `dim` (over its cap, for tool calls)."""
        floor = _EXHAUSTED_AT.get(dim, 0.0)
        return next((n for n in self.chain if n.account.headroom(dim) <= floor), self)

    def _refusal_error(self, refusal: lg.Refusal, what: str, shared: bool = False, note: str = "") -> BudgetExceeded:
        by = self._refuser(refusal, shared)
        if refusal.dim not in _DIM_REASON and refusal.message:  # the store refused for its own reason
            return self.stop(StopReason.ERROR, None, f"{what} was not sent: {refusal.message}.", by=by)
        reason, field = _DIM_REASON.get(refusal.dim, (StopReason.ERROR, refusal.dim))
        where = f" of run '{refusal.scope}'" if refusal.scope and refusal.scope != self.name else ""
        if shared:
            where = f" of the shared budget '{refusal.scope}'"
        detail = f"{what} was not sent: it would exceed {field}{where} ({refusal.describe()}).{note}"
        return self.stop(reason, field, detail, by=by, pausable=not shared)

    def _check_open(self, what: str, done: str = "was not sent") -> None:
        """Refuse work for a run that has ended (a thread it started outlived it, or code charging it after its
        `with` block): a closed run is never charged.

        The ended run's outcome is final; an open run below it (opened in that thread) records the stop.
        """
        for ended in self.chain:
            if ended.closed:
                break
        else:
            return
        detail = (f"{what} {done}: the run '{ended.name}' it belongs to has already ended (the work was started "
                  "in the run, e.g. in a thread, and outlived it); wait for such work before the run ends, or start "
                  "it outside the run.")
        if ended is self:  # no open run of this work to catch it: it propagates as outside any run
            exc = BudgetExceeded(StopReason.CANCELLED, detail, outcome=self.outcome)
            exc.run_path = frozenset()  # type: ignore[attr-defined]
            raise exc
        raise self.stop(StopReason.CANCELLED, None, detail)

    def _deadline_owner(self) -> Self:
        """The run of the chain whose max_seconds ends first (the one whose time is up)."""
        timed = [n for n in self.chain if n.budget.max_seconds is not None]
        return min(timed, key=lambda n: n.started + (n.budget.max_seconds or 0.0), default=self)

    def _check_gates(self, what: str, counted: bool = False) -> None:
        """Raise BudgetExceeded for an ended run, depth, time and pending stops (repeat, tool calls). `counted`: a
        tool execution whose request was counted within max_tool_calls, which a tool-call stop does not refuse."""
        self._check_open(what)
        if self.depth_refused:
            raise self.stop(StopReason.DEPTH, "max_depth", f"{what} was not sent: {self.depth_refused}.")
        deadline = self.deadline
        # (paused time only moves the deadline later: it is added up only once the deadline itself has passed)
        if deadline is not math.inf and (now := time.monotonic()) >= deadline and now >= deadline + self._paused_chain():
            raise self.stop(StopReason.TIME, "max_seconds", f"{what} was not sent: the run's time is up.",
                            by=self._deadline_owner())
        if self.stop_state is not None and (self.stop_state[0] in _GATED_STOPS or self.limit_declined):
            reason, limit, detail = self.stop_state
            if counted and reason is StopReason.TOOL_CALLS and not self.limit_declined:
                return
            raise self.stop(reason, limit, detail)

    # --- outcome ----------------------------------------------------------------------------------------

    def usage(self) -> Usage:
        used, st = self.account.used, self.stats
        return Usage(  # clamped: an outcome is always a valid Usage, whatever a provider reported
            model_calls=_count(st["model_calls"]),
            tool_calls=_count(used["tool_calls"]),
            input_tokens=_count(used["input_tokens"]),
            output_tokens=_count(used["output_tokens"]),
            cache_read_tokens=_count(st["cache_read"]),
            cache_write_tokens=_count(st["cache_write"]),
            reasoning_tokens=_count(st["reasoning"]),
            cost_usd=_amount(round(used["usd"], 10)),
            seconds=_amount(round(self.elapsed(), 6)),
            unpriced_calls=_count(st["unpriced"]),
        )

    def snapshot(self, reason: StopReason, limit: str | None, detail: str) -> RunOutcome:
        return RunOutcome(
            run_name=self.name, stop_reason=reason, limit=limit, usage=self.usage(), detail=detail,
            trace_id=self.trace_id,
            paused=self.approval.paused_run(self) if reason is StopReason.AWAITING_APPROVAL and self.approval else None,
        )


def _count(value: float) -> int:
    return int(value) if value == value and 0 < value < math.inf else 0


def _amount(value: float) -> float:
    return float(value) if value == value and 0 < value < math.inf else 0.0
