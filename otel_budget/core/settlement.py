"""How what a run reserved becomes what it used: settling and releasing calls and tools, charges, a resumed
run's carried-over usage, and the near-limit signal."""
from __future__ import annotations

import logging
import math

from ..model.budget import StopReason, Usage, check_cost
from ..model.trust import amount
from . import config
from . import ledger as lg
from .in_flight import NodeInFlight, _wake_all
from .node_state import _DIM_REASON, _LOCAL_STORE, Admission

log = logging.getLogger(__name__)


class NodeSettlement(NodeInFlight):
    """Settlement: the accounts (and shared scopes) end up charged with what each call and tool used, once."""

    def release(self, adm: Admission) -> None:
        """Give back a reservation whose call was never sent."""
        lg.settle(self.accounts, adm.amounts, {}, self.lock)
        self._settle_shared(adm.shared, {})
        self._done(adm)

    def _settle_shared(self, held: list[lg.Reservation], actual: dict[str, float]) -> None:
        if not held:
            return
        store = config.get().ledger or _LOCAL_STORE
        for reservation in held:
            try:
                store.settle(reservation, actual)
            except Exception:  # noqa: BLE001 - a store failure must not break the agent
                log.warning("otel-budget: settling in the shared ledger failed", exc_info=True)

    def _charge_shared(self, actual: dict[str, float]) -> None:
        if self.scopes:
            self._settle_shared([lg.Reservation(scope.name, "", {}) for scope in self.scopes], actual)

    def settle(
        self,
        adm: Admission,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read: int = 0,
        cache_write: int = 0,
        reasoning: int = 0,
        cost: float | None,
        input_chars: int | None = None,
    ) -> None:
        """Replace the call's reservation by what it used (usage reported by the API, or the best estimate)."""
        actual = {
            "steps": 1.0,
            "input_tokens": float(input_tokens),
            "output_tokens": float(output_tokens),
            "total_tokens": float(input_tokens + output_tokens),
        }
        if cost is not None:
            actual["usd"] = cost
        with self.lock:  # the accounts, the calls in flight and the counters in one step
            near = lg.settle_locked(self.accounts, adm.amounts, actual)
            waiters = self._done_locked(adm)
            for node in self.chain:
                st = node.stats
                st["model_calls"] += 1
                if cache_read:
                    st["cache_read"] += cache_read
                if cache_write:
                    st["cache_write"] += cache_write
                if reasoning:
                    st["reasoning"] += reasoning
                if cost is None:
                    st["unpriced"] += 1
        if waiters:
            _wake_all(waiters)
        if adm.shared:
            self._settle_shared(adm.shared, actual)
        if input_chars and input_tokens > 0:
            ratio = input_chars / input_tokens  # kept within 1 to 8 (comparisons: min() and max() cost more in C)
            self.root.chars_per_token = 8.0 if ratio > 8.0 else ratio if ratio > 1.0 else 1.0
            if adm.prompt_shape is not None:  # a reported count: the base of the next request's bound
                self.last_prompt = (adm.prompt_shape[0], adm.prompt_shape[1], input_tokens)
        if near or self.deadline != math.inf:  # a use reached a near threshold (a mark), or time may be near
            self._check_near(near)

    def settle_open_calls(self) -> None:
        """Settle the calls still open when the run ends (a stream left unread): each with the best estimate of
        what it consumed, so the outcome counts them."""
        for guard in list(self.open_calls):
            guard.abandon()

    def note_truncation(self, adm: Admission) -> None:
        """The answer of an admitted call was cut at the output limit the budget set: the budget, not the model,
        ended it, so the run stops for that limit (a framework that then fails on the cut answer ends the same)."""
        reason, field = _DIM_REASON.get(adm.bound_by, (StopReason.TOKENS, "max_output_tokens"))
        self.truncated_by_budget = True
        if self.stop_state is None:
            detail = (f"the answer of call {adm.turn} was cut at {adm.max_output_tokens} output tokens: that was all "
                      f"{field} left room for.")
            reason, detail = self._pause_at_limit(reason, field, detail, self._exhausted(adm.bound_by or "usd"))
            self.stop_state = (reason, field, detail)

    def release_tool(self, name: str, reserved: dict[str, float]) -> None:
        """A tool execution that did not happen after all (a framework interrupted it and runs it again on
        resume): undo its admission, so the run that executes it counts it once."""
        lg.settle(self.accounts, reserved, {}, self.lock)
        if "tool_calls" not in reserved:
            with self.lock:
                self.pending_tools[name] += 1  # the model's request still counts; its execution is to come

    def settle_tool(self, name: str, reserved: dict[str, float]) -> None:
        lg.settle(self.accounts, reserved, reserved, self.lock)
        self._charge_shared(reserved)
        with self.lock:
            for node in self.chain:
                node.tools_executed[name] += 1
        self._check_near()

    def charge(self, usd: float, name: str = "charge") -> None:
        """Charge a cost no instrumented client reports (a browser, a paid API); it counts against max_usd.

        A run that has ended is never charged: BudgetExceeded (`cancelled`) says so, as for a call made from work
        that outlived the run."""
        usd = check_cost(usd, "charge(usd=...)")
        self._check_open(f"run.charge(usd={usd!r}, name={name!r})", "was not counted")
        lg.settle(self.accounts, {}, {"usd": float(usd)}, self.lock)
        self._charge_shared({"usd": float(usd)})
        self.charges[name] = self.charges.get(name, 0.0) + usd
        self._check_near()

    def carry_over(self, usage: Usage) -> None:
        """Start this run with `usage` already consumed: a resumed run (after an interrupt or approval) keeps
        the quota its earlier part used instead of starting fresh. Shared scopes were charged when it happened.
        A NaN, infinite or negative number (from an edited paused run) is refused: it would give quota back.
        """
        for field, value in usage:
            amount(value, field, "carry_over(usage)")
        used = {
            "steps": float(usage.model_calls),
            "tool_calls": float(usage.tool_calls),
            "input_tokens": float(usage.input_tokens),
            "output_tokens": float(usage.output_tokens),
            "total_tokens": float(usage.input_tokens + usage.output_tokens),
            "usd": float(usage.cost_usd),
        }
        lg.settle(self.accounts, {}, {k: v for k, v in used.items() if v}, self.lock)
        with self.lock:
            for node in self.chain:
                st = node.stats
                st["model_calls"] += usage.model_calls
                st["cache_read"] += usage.cache_read_tokens
                st["cache_write"] += usage.cache_write_tokens
                st["reasoning"] += usage.reasoning_tokens
                st["unpriced"] += usage.unpriced_calls
            self.root.turns += usage.model_calls
            if usage.seconds > 0:
                self.started -= usage.seconds
                if self.budget.max_seconds is not None:
                    self.deadline = min(self.deadline, self.started + self.budget.max_seconds)
        self._check_near()

    def _check_near(self, dims: bool = True) -> None:
        """Whether a run of the chain just crossed `Budget.near` (without `dims`: in time only)."""
        for node in self.chain:
            if not node.near_crossed and node.near_reached(dims):  # (a run with only max_seconds is near in time too)
                node.near_crossed = True
                node.account.marks = None  # crossed once: nothing more to watch
                config.get().telemetry.crossed_near(node)
