"""One run in the tree: its budget, its account, and the budget decisions for the calls made in it.

A nested run draws from its own account and from every ancestor's at once, so a subagent can only narrow what
its parents leave. The current node lives in a `ContextVar`, so the tree follows asyncio tasks and threads
started with `contextvars.copy_context()`.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from . import config
from . import ledger as lg
from . import semconv as sc
from .budget import LIMITS, Budget, BudgetExceeded, RunOutcome, StopReason, UnknownPriceError, Usage

if TYPE_CHECKING:
    from .approval import ApprovalState


log = logging.getLogger(__name__)
_current: ContextVar[RunNode | None] = ContextVar("otel_budget_run", default=None)
#: The shared-scope store when `instrument(ledger=...)` names none: scopes shared within this process.
_LOCAL_STORE = lg.MemoryLedger()
_ids = itertools.count(1)

#: Ledger dimension -> (stop reason, Budget field).
_DIM_REASON: dict[str, tuple[StopReason, str]] = {dim: (reason, f) for f, (dim, reason, _) in LIMITS.items()}
#: Stops recorded between calls that refuse the next model or tool call.
_GATED_STOPS = (StopReason.REPEAT, StopReason.TOOL_CALLS, StopReason.AWAITING_APPROVAL, StopReason.DENIED)
#: A finished run needs no wrap-up, and a paused one goes on later: neither spends a call on a summary.
_NO_MODEL_WRAP_UP = (StopReason.DONE, StopReason.AWAITING_APPROVAL)
#: Above this many output tokens of headroom the enforcer leaves a request without an output limit as it is.
AUTO_MAX_TOKENS_CEILING = 16384
#: Reserved as the output of a call with no output limit when the budget leaves more than the ceiling.
_UNBOUNDED_OUTPUT_RESERVE = 4096
#: Dimensions counted per call that need no input estimate.
_COUNT_DIMS = frozenset({"steps", "tool_calls"})
_WRAP_UP_MAX_TOKENS = 300


def current_run() -> RunNode | None:
    """The innermost active run of this context, or None."""
    return _current.get()


def canonical_arguments(arguments: Any) -> str:
    """Tool arguments as one canonical string (JSON with sorted keys), for repetition checks."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments.strip()
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return repr(arguments)


class Admission:
    """What a call reserved; settle or release it exactly once."""

    __slots__ = (
        "node", "amounts", "max_output_tokens", "set_max_tokens", "timeout", "turn", "input_estimate", "shared",
        "bound_by",
    )

    def __init__(self, node: RunNode, amounts: dict[str, float]) -> None:
        self.node = node
        self.amounts = amounts
        self.shared: list[lg.Reservation] = []
        self.max_output_tokens: int | None = None
        self.set_max_tokens = False
        self.bound_by = "output_tokens"  # the ledger dimension that set the output limit (when set_max_tokens)
        self.timeout: float | None = None
        self.turn = 0
        self.input_estimate = 0


class RunNode:
    """One run in the tree: its budget, its account, what it saw, how it ended."""

    def __init__(self, name: str, budget: Budget, parent: RunNode | None) -> None:
        self.id = next(_ids)
        self.name = name
        self.budget = budget
        self.parent = parent
        self.root: RunNode = parent.root if parent is not None else self
        self.depth: int = parent.depth + 1 if parent is not None else 1
        self.account = lg.Account(budget.limits(), name=name)
        self.chain: tuple[RunNode, ...] = (self, *(parent.chain if parent is not None else ()))
        self.accounts = tuple(n.account for n in self.chain)
        self.path = frozenset(n.id for n in self.chain)
        self.lock: threading.Lock = parent.lock if parent is not None else threading.Lock()
        self.started = time.monotonic()
        self.paused_seconds = 0.0
        self.deadline = min(
            (n.started + n.budget.max_seconds for n in self.chain if n.budget.max_seconds is not None),
            default=math.inf,
        )
        self.stats: Counter[str] = Counter()  # cache_read, cache_write, reasoning, unpriced, model_calls
        self.tools_requested: Counter[str] = Counter()
        self.tools_executed: Counter[str] = Counter()
        self.pending_tools: Counter[str] = Counter()
        self._last_request: str | None = None
        self._request_streak = 0
        self._last_exec: str | None = None
        self._exec_streak = 0
        self.stop_state: tuple[StopReason, str | None, str] | None = None
        self.outcome: RunOutcome | None = None
        self.near_crossed = False
        self.turns = 0  # model calls in this run tree, counted at the root
        self.chars_per_token = 4.0
        self.summarize: Callable[[str, int], Any] | None = None
        self.holdback: dict[str, float] | None = None
        self.depth_refused = self._depth_exceeded()
        self.charges: dict[str, float] = {}  # USD charged by name
        # Approvals, denials and the pending call are shared by the run tree (see approval.py).
        self.approval: ApprovalState | None = parent.approval if parent is not None else None
        if self.approval is None and budget.approve is not None:
            from .approval import ApprovalState

            self.approval = ApprovalState()
        self.saved_state: Any = None  # what the code keeps for a resume (Run.checkpoint)
        self.extra_scopes: tuple[Any, ...] = ()  # scopes added to a started run (propagation: a tree across processes)
        self.scopes: tuple[Any, ...] = ()
        self._limited_dims: frozenset[str] | None = None
        self.add_scopes(())
        self.unenforced = 0  # calls a shared store let through without its cap (fail="open")
        self.truncated_by_budget = False  # an answer was cut at the output limit the budget set (note_truncation)
        self.framework_approval = False  # a framework pauses for approval itself (see ApprovalState.on_request)

    # --- limits -----------------------------------------------------------------------------------------

    def _depth_exceeded(self) -> str | None:
        for anc in self.chain[1:]:
            limit = anc.budget.max_depth
            if limit is not None and self.depth - anc.depth + 1 > limit:
                return f"max_depth {limit} of run '{anc.name}' allows no run at depth {self.depth - anc.depth + 1}"
        limit = self.budget.max_depth
        if limit is not None and limit < 1:
            return f"max_depth {limit}"
        return None

    def span_limits(self) -> dict[str, float]:
        out = dict(self.account.limits)
        if self.budget.max_seconds is not None:
            out["seconds"] = self.budget.max_seconds
        return out

    def elapsed(self) -> float:
        return time.monotonic() - self.started - self.paused_seconds

    def utilization(self) -> dict[str, float]:
        """used / limit per limited dimension of this run, seconds included."""
        util = self.account.utilization()
        if self.budget.max_seconds is not None:
            util["seconds"] = self.elapsed() / self.budget.max_seconds
        return util

    def utilization_max(self) -> float:
        return max(self.utilization().values(), default=0.0)

    def stop(self, reason: StopReason, limit: str | None, detail: str) -> BudgetExceeded:
        """Record that the run stops (the first stop recorded wins) and return the BudgetExceeded to raise."""
        if self.stop_state is None:
            self.stop_state = (reason, limit, detail)
        exc = BudgetExceeded(reason, detail, limit=limit, outcome=self.snapshot(reason, limit, detail))
        exc.run_id = self.id
        exc.run_path = self.path  # type: ignore[attr-defined]
        return exc

    def _refusal_error(self, refusal: lg.Refusal, what: str, shared: bool = False) -> BudgetExceeded:
        if refusal.dim not in _DIM_REASON and refusal.message:  # the store refused for its own reason
            return self.stop(StopReason.ERROR, None, f"{what} was not sent: {refusal.message}.")
        reason, field = _DIM_REASON.get(refusal.dim, (StopReason.ERROR, refusal.dim))
        where = f" of run '{refusal.scope}'" if refusal.scope and refusal.scope != self.name else ""
        if shared:
            where = f" of the shared budget '{refusal.scope}'"
        detail = f"{what} was not sent: it would exceed {field}{where} ({refusal.describe()})."
        return self.stop(reason, field, detail)

    def _check_gates(self, what: str) -> None:
        """Raise BudgetExceeded for depth, time and pending stops (repeat, tool calls)."""
        if self.depth_refused:
            raise self.stop(StopReason.DEPTH, "max_depth", f"{what} was not sent: {self.depth_refused}.")
        if self.deadline is not math.inf and time.monotonic() >= self.deadline + self._paused_chain():
            raise self.stop(StopReason.TIME, "max_seconds", f"{what} was not sent: the run's time is up.")
        if self.stop_state is not None and self.stop_state[0] in _GATED_STOPS:
            reason, limit, detail = self.stop_state
            raise self.stop(reason, limit, detail)

    def _paused_chain(self) -> float:
        return max((n.paused_seconds for n in self.chain), default=0.0)

    def time_left(self) -> float:
        return self.deadline + self._paused_chain() - time.monotonic()

    def allows(self) -> bool:
        """Whether one more minimal model call fits; records the stop reason when it does not."""
        if self.stop_state is not None:
            return False
        try:
            self._check_gates("the next model call")
        except BudgetExceeded:
            return False
        for dim in ("steps", "input_tokens", "output_tokens", "total_tokens", "usd"):
            room = lg.headroom(self.accounts, dim)
            if room <= (0 if dim != "steps" else 0.5):
                reason, field = _DIM_REASON[dim]
                self.stop(reason, field, f"the run has no {dim} left ({field}).")
                return False
        if lg.headroom(self.accounts, "tool_calls") < 0:
            self.stop(StopReason.TOOL_CALLS, "max_tool_calls", "the model requested more tool calls than allowed.")
            return False
        return self._shared_allows()

    def _shared_allows(self) -> bool:
        """Whether every shared scope has room left (one read each; an unreachable store is left to the call)."""
        if not self.scopes:
            return True
        store = config.get().ledger or _LOCAL_STORE
        for scope in self.scopes:
            try:
                taken = store.read(scope.name)
            except Exception:  # noqa: BLE001 - the next call applies the store's fail mode
                continue
            for dim, limit in scope.limits().items():
                if dim in _DIM_REASON and taken.get(dim, 0.0) > limit - (0.5 if dim == "steps" else 0.0):
                    reason, field = _DIM_REASON[dim]
                    self.stop(reason, field, f"the shared budget '{scope.name}' has no {dim} left ({field}).")
                    return False
        return True

    # --- model calls ------------------------------------------------------------------------------------

    def admit(self, provider: str, model: str, max_output: int | None, input_chars: Callable[[], int]) -> Admission:
        """Check and reserve one model call, or raise BudgetExceeded / UnknownPriceError; nothing is sent."""
        what = f"the call to {model}"
        self._check_gates(what)
        limited = self._limited()
        if "tool_calls" in limited and lg.headroom(self.accounts, "tool_calls") < 0:
            raise self.stop(
                StopReason.TOOL_CALLS, "max_tool_calls", f"{what} was not sent: the model requested more tool "
                "calls than max_tool_calls allows."
            )
        amounts: dict[str, float] = {"steps": 1.0}
        adm = Admission(self, amounts)
        if not limited - _COUNT_DIMS:
            self._reserve(adm, what)
            return adm
        # A small margin covers what the SDK adds to the body and the provider's message framing tokens.
        est_in = int(input_chars() / self.root.chars_per_token * 1.05) + 8
        adm.input_estimate = est_in
        pricing = None
        if "usd" in limited:
            pricing = config.get().prices.lookup(provider, model)
            if pricing is None:
                raise UnknownPriceError(
                    f"otel-budget: no price is known for model '{model}' (provider '{provider}') and this run has "
                    f"a money cap (max_usd), so the call was not sent. Add its price, e.g. "
                    f"otel_budget.instrument(prices={{'{model}': otel_budget.Price(input_per_mtok=..., "
                    f"output_per_mtok=...)}}), or remove max_usd."
                )
        out = max_output
        input_cost = per_token = 0.0
        if pricing is not None:
            input_cost = pricing.cost(est_in, 0)
            per_token = (pricing.cost(est_in, 1_000_000) - input_cost) / 1_000_000
        if out is None:
            rooms = {
                "output_tokens": lg.headroom(self.accounts, "output_tokens"),
                "total_tokens": lg.headroom(self.accounts, "total_tokens") - est_in,
            }
            if per_token > 0:
                rooms["usd"] = (lg.headroom(self.accounts, "usd") - input_cost) / per_token
            adm.bound_by = min(rooms, key=lambda d: rooms[d])
            room = rooms[adm.bound_by]
            if room <= AUTO_MAX_TOKENS_CEILING and self._auto_max_tokens():
                out = max(0, int(room))
                adm.set_max_tokens = out >= 1
            else:
                # room is infinite when only a shared scope limits output: reserve the default worst case there
                out = min(_UNBOUNDED_OUTPUT_RESERVE, int(room)) if room != math.inf else _UNBOUNDED_OUTPUT_RESERVE
        adm.max_output_tokens = out
        amounts["input_tokens"] = est_in
        amounts["output_tokens"] = out
        amounts["total_tokens"] = est_in + out
        if pricing is not None:
            amounts["usd"] = input_cost + out * per_token
        self._reserve(adm, what)
        if max_output is None and adm.max_output_tokens is not None and adm.max_output_tokens < 1:
            self.release(adm)
            dim = "usd" if pricing is not None and lg.headroom(self.accounts, "usd") < math.inf else "total_tokens"
            reason, field = _DIM_REASON[dim]
            raise self.stop(reason, field, f"{what} was not sent: the budget leaves no room for any output ({field}).")
        return adm

    def add_scopes(self, extra: tuple[Any, ...]) -> None:
        """Draw from more shared scopes from now on (the chain's own scopes come first, each name once)."""
        self.extra_scopes = (*self.extra_scopes, *extra)
        scopes: dict[str, Any] = {}
        for n in self.chain:
            for scope in (n.budget.scope, *n.extra_scopes):
                if scope is not None:
                    scopes.setdefault(scope.name, scope)
        self.scopes = tuple(scopes.values())
        self._limited_dims = None

    def _limited(self) -> frozenset[str]:
        """The dimensions limited anywhere in the chain or its shared scopes (limits are fixed per run)."""
        limited = self._limited_dims
        if limited is None:
            limited = self._limited_dims = frozenset().union(
                *(acc.limits for acc in self.accounts), *(scope.limits() for scope in self.scopes)
            )
        return limited

    def _auto_max_tokens(self) -> bool:
        return all(n.budget.auto_max_tokens for n in self.chain)

    def _reserve(self, adm: Admission, what: str) -> None:
        refusal = lg.reserve(self.accounts, adm.amounts, self.lock)
        if refusal is not None:
            raise self._refusal_error(refusal, what)
        if self.scopes:
            adm.shared = self._reserve_shared(adm.amounts, what, local=adm.amounts)
        if self.deadline is not math.inf:
            adm.timeout = max(0.001, self.time_left())
        with self.lock:
            self.root.turns += 1
            adm.turn = self.root.turns

    def release(self, adm: Admission) -> None:
        """Give back a reservation whose call was never sent."""
        lg.settle(self.accounts, adm.amounts, {}, self.lock)
        self._settle_shared(adm.shared, {})

    def precheck(self, provider: str, model: str, max_output: int | None, input_chars: Callable[[], int]) -> None:
        """Raise BudgetExceeded (recording the stop) when a call like this would be refused now; keeps nothing.

        For a framework that must end its turn before it attempts a call (the call is still admitted when sent).
        `input_chars` should not exceed the request's size, so that what this refuses `admit` would refuse too."""
        adm = self.admit(provider, model, max_output, input_chars)
        self.release(adm)
        with self.lock:
            if self.root.turns == adm.turn:  # the probe takes no turn number (unless another call came in between)
                self.root.turns -= 1

    # --- shared (fleet) scopes ----------------------------------------------------------------------------

    def _reserve_shared(self, amounts: dict[str, float], what: str, local: dict[str, float]) -> list[lg.Reservation]:
        """Reserve in every shared scope too; on a refusal undo everything and raise."""
        store = config.get().ledger or _LOCAL_STORE
        held: list[lg.Reservation] = []
        for scope in self.scopes:
            result = store.reserve(scope.name, amounts, scope.limits(), window=scope.window_seconds)
            if isinstance(result, lg.Refusal):
                lg.settle(self.accounts, local, {}, self.lock)
                self._settle_shared(held, {})
                result.scope = result.scope or scope.name
                raise self._refusal_error(result, what, shared=True)
            if not result.enforced:
                self.unenforced += 1
                config.get().telemetry.fail_open.add(1, {sc.LABEL_RUN_NAME: self.root.name, sc.LABEL_SCOPE: scope.name})
            held.append(result)
        return held

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
        lg.settle(self.accounts, adm.amounts, actual, self.lock)
        if adm.shared:
            self._settle_shared(adm.shared, actual)
        if input_chars and input_tokens > 0:
            self.root.chars_per_token = min(8.0, max(1.0, input_chars / input_tokens))
        with self.lock:
            for node in self.chain:
                st = node.stats
                st["model_calls"] += 1
                st["cache_read"] += cache_read
                st["cache_write"] += cache_write
                st["reasoning"] += reasoning
                if cost is None:
                    st["unpriced"] += 1
        self._check_near()

    def note_truncation(self, adm: Admission) -> None:
        """The answer of an admitted call was cut at the output limit the budget set: the budget, not the model,
        ended it, so the run stops for that limit (a framework that then fails on the cut answer ends the same)."""
        reason, field = _DIM_REASON.get(adm.bound_by, (StopReason.TOKENS, "max_output_tokens"))
        self.truncated_by_budget = True
        if self.stop_state is None:
            self.stop_state = (reason, field, f"the answer of call {adm.turn} was cut at {adm.max_output_tokens} "
                               f"output tokens: that was all {field} left room for.")

    def record_tool_requests(self, calls: list[tuple[Any, ...]]) -> None:
        """The model asked for these tools, as (name, arguments[, call id]): count them, watch for repetition
        and for calls that need a person's approval.
        """
        if not calls:
            return
        lg.settle(self.accounts, {}, {"tool_calls": float(len(calls))}, self.lock)
        self._charge_shared({"tool_calls": float(len(calls))})
        limit = self.budget.max_repeats
        for name, args, *call_id in calls:
            if self.approval is not None:
                self.approval.on_request(self, name, args, call_id[0] if call_id else None)
            self.tools_requested[name] += 1
            self.pending_tools[name] += 1
            key = f"{name}\x00{canonical_arguments(args)}"
            self._request_streak = self._request_streak + 1 if key == self._last_request else 1
            self._last_request = key
            if limit is not None and self._request_streak >= limit and self.stop_state is None:
                self.stop_state = (
                    StopReason.REPEAT,
                    "max_repeats",
                    f"the model requested {name} with the same arguments {self._request_streak} times in a row "
                    f"(max_repeats={limit}); the next model call was not sent.",
                )
        if lg.headroom(self.accounts, "tool_calls") < 0 and self.stop_state is None:
            self.stop_state = (
                StopReason.TOOL_CALLS,
                "max_tool_calls",
                "the model requested more tool calls than max_tool_calls allows; the next call was not sent.",
            )
        self._check_near()

    def admit_tool(self, name: str, arguments: Any, cost_usd: float) -> dict[str, float]:
        """Check a tool execution before it runs; returns what it reserved."""
        what = f"the tool {name}"
        self._check_gates(what)
        if self.approval is not None:
            self.approval.on_execute(self, name, arguments)
        key = f"{name}\x00{canonical_arguments(arguments)}"
        streak = self._exec_streak + 1 if key == self._last_exec else 1
        limit = self.budget.max_repeats
        if limit is not None and streak >= limit:
            raise self.stop(
                StopReason.REPEAT,
                "max_repeats",
                f"{what} was not run: it would run with the same arguments {streak} times in a row "
                f"(max_repeats={limit}).",
            )
        amounts: dict[str, float] = {}
        with self.lock:
            precounted = self.pending_tools[name] > 0
            if precounted:
                self.pending_tools[name] -= 1
        if not precounted:
            amounts["tool_calls"] = 1.0
        if cost_usd:
            amounts["usd"] = cost_usd
        if amounts:
            refusal = lg.reserve(self.accounts, amounts, self.lock)
            if refusal is not None:
                raise self._refusal_error(refusal, what)
            if self.scopes:
                self._settle_shared(self._reserve_shared(amounts, what, local=amounts), {})
        self._exec_streak, self._last_exec = streak, key
        return amounts

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
        self.tools_executed[name] += 1
        self._check_near()

    def charge(self, usd: float, name: str = "charge") -> None:
        """Charge a cost no instrumented client reports (a browser, a paid API); it counts against max_usd."""
        if usd < 0:
            raise ValueError("charge(usd=...) must not be negative")
        lg.settle(self.accounts, {}, {"usd": float(usd)}, self.lock)
        self._charge_shared({"usd": float(usd)})
        self.charges[name] = self.charges.get(name, 0.0) + usd
        self._check_near()

    def carry_over(self, usage: Usage) -> None:
        """Start this run with `usage` already consumed: a resumed run (after an interrupt or approval) keeps
        the quota its earlier part used instead of starting fresh. Shared scopes were charged when it happened.
        """
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

    def _check_near(self) -> None:
        for node in self.chain:
            if not node.near_crossed and node.account.limits and node.utilization_max() >= node.budget.near:
                node.near_crossed = True
                config.get().telemetry.crossed_near(node)

    # --- outcome ----------------------------------------------------------------------------------------

    def usage(self) -> Usage:
        used, st = self.account.used, self.stats
        return Usage(
            model_calls=int(st["model_calls"]),
            tool_calls=int(used["tool_calls"]),
            input_tokens=int(used["input_tokens"]),
            output_tokens=int(used["output_tokens"]),
            cache_read_tokens=int(st["cache_read"]),
            cache_write_tokens=int(st["cache_write"]),
            reasoning_tokens=int(st["reasoning"]),
            cost_usd=round(used["usd"], 10),
            seconds=round(self.elapsed(), 6),
            unpriced_calls=int(st["unpriced"]),
        )

    def snapshot(self, reason: StopReason, limit: str | None, detail: str) -> RunOutcome:
        return RunOutcome(
            run_name=self.name, stop_reason=reason, limit=limit, usage=self.usage(), detail=detail,
            trace_id=self.trace_id,
            paused=self.approval.paused_run(self) if reason is StopReason.AWAITING_APPROVAL and self.approval else None,
        )

    trace_id: str | None = None
    span_id: str | None = None

