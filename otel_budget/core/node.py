"""One run in the tree: its budget, its account, and the budget decisions for the calls made in it.

A nested run draws from its own account and from every ancestor's at once, so a subagent can only narrow what
its parents leave. The current node lives in a `ContextVar`, so the tree follows asyncio tasks, and threads and
pool tasks started in a run (`instrumentation/threads.py` copies the context when they start).
"""
from __future__ import annotations

import asyncio
import hashlib
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

from ..model.budget import LIMITS, Budget, StopReason, Usage, check_cost
from ..model.outcome import BudgetExceeded, RunOutcome, UnknownPriceError
from ..telemetry import semconv as sc
from . import config
from . import ledger as lg
from .progress import ProgressWatch, find_cycle, newest_results

if TYPE_CHECKING:
    from .approval import ApprovalState
from ..model.signatures import canonical_arguments

log = logging.getLogger(__name__)
_current: ContextVar[RunNode | None] = ContextVar("otel_budget_run", default=None)
#: The shared-scope store when `instrument(ledger=...)` names none: scopes shared within this process.
_LOCAL_STORE = lg.MemoryLedger()
_ids = itertools.count(1)

#: Ledger dimension -> (stop reason, Budget field).
_DIM_REASON: dict[str, tuple[StopReason, str]] = {dim: (reason, f) for f, (dim, reason, _) in LIMITS.items()}
#: Stops recorded between calls that refuse the next model or tool call.
_GATED_STOPS = (StopReason.REPEAT, StopReason.STALLED, StopReason.TOOL_CALLS, StopReason.AWAITING_APPROVAL,
                StopReason.DENIED)
#: A finished run needs no wrap-up, and a paused one goes on later: neither spends a call on a summary.
_NO_MODEL_WRAP_UP = (StopReason.DONE, StopReason.AWAITING_APPROVAL)
#: Above this many output tokens of headroom the enforcer leaves a request without an output limit as it is.
AUTO_MAX_TOKENS_CEILING = 16384
#: Reserved as the output of a call with no output limit when the budget leaves more than the ceiling.
_UNBOUNDED_OUTPUT_RESERVE = 4096
#: Headroom at or below which an account counts as used up (a step needs a whole one; tool calls stop when over).
_EXHAUSTED_AT = {"steps": 0.5, "tool_calls": -0.5}
#: Dimensions counted per call that need no input estimate.
_COUNT_DIMS = frozenset({"steps", "tool_calls"})
_WRAP_UP_MAX_TOKENS = 300
#: Dimensions a call in flight may give back when it settles: a refusal on them can wait for that.
_WAIT_DIMS = frozenset({"input_tokens", "output_tokens", "total_tokens", "usd"})
#: The longest a refused call waits for one call in flight to settle before it is refused after all.
_MAX_ADMISSION_WAIT = 60.0


def current_run() -> RunNode | None:
    """The innermost active run of this context, or None."""
    return _current.get()


#: Request fields that do not change the input tokens: two requests that differ only in them share a prefix.
_OUTPUT_FIELDS = frozenset({
    "max_tokens", "max_completion_tokens", "max_output_tokens", "temperature", "top_p", "top_k", "stream",
    "stream_options", "n", "seed", "stop", "stop_sequences", "metadata", "user", "store", "timeout",
})


def _prompt_shape(body: dict[str, Any], key: str) -> tuple[str, tuple[str, ...], tuple[int, ...]] | None:
    """(digest of the body without its messages and output fields, digest of each message, characters of each
    message's JSON), or None when the body cannot be read so."""
    messages = body.get(key)
    if not isinstance(messages, list):
        return None
    try:
        rest = {k: v for k, v in body.items() if k != key and k not in _OUTPUT_FIELDS}
        head = hashlib.sha1(json.dumps(rest, sort_keys=True, default=str).encode(), usedforsecurity=False).hexdigest()
        texts = [json.dumps(m, sort_keys=True, default=str) for m in messages]
    except Exception:  # noqa: BLE001 - odd content: no prefix bound, the whole body's bound applies
        return None
    digests = tuple(hashlib.sha1(t.encode(), usedforsecurity=False).hexdigest() for t in texts)
    return head, digests, tuple(len(t) for t in texts)


#: Set by async adapters while they admit a call: a refusal that only waits for calls in flight raises
#: RoomPending for them to await, instead of refusing.
_MAY_AWAIT_ROOM: ContextVar[bool] = ContextVar("otel_budget_may_await_room", default=False)


class RoomPending(Exception):  # noqa: N818 - not an error: a signal to the async adapter
    """A call did not fit only because of what calls in flight hold: await `wait()`, then admit it again."""

    def __init__(self, node: RunNode, seen: int) -> None:
        super().__init__("waiting for calls in flight to settle")
        self.node = node
        self.seen = seen

    async def wait(self) -> bool:
        """True once a call settled (admit again); False when none did in time (admit again, without waiting)."""
        return await self.node.wait_settled(self.seen)


def may_await_room() -> ContextVar[bool]:
    """The flag an async adapter sets around admission when it can await RoomPending."""
    return _MAY_AWAIT_ROOM


def _holder() -> int:
    """Who holds a call in flight: the asyncio task, else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return id(task) if task is not None else threading.get_ident()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Admission:
    """What a call reserved; settle or release it exactly once."""

    __slots__ = (
        "node", "amounts", "max_output_tokens", "set_max_tokens", "timeout", "turn", "input_estimate", "shared",
        "bound_by", "estimated", "prompt_shape", "thread",
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
        self.estimated = False  # input reserved at the estimate (the tree's one such call in flight), not the bound
        self.prompt_shape: tuple[str, tuple[str, ...], tuple[int, ...]] | None = None  # see _prompt_shape
        self.thread: int | None = None  # the task or thread that holds the call in flight (None once settled)


class RunNode:
    """One run in the tree: its budget, its account, what it saw, how it ended."""

    def __init__(self, name: str, budget: Budget, parent: RunNode | None) -> None:
        self.id = next(_ids)
        self.name = name
        self.budget = budget
        self.parent = parent
        self.conversation_id: str | None = parent.conversation_id if parent is not None else None
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
        self.requested_ids: dict[str, list[str]] = {}  # name + canonical arguments -> call ids the model gave
        self._last_request: str | None = None
        self._request_streak = 0
        self._last_exec: str | None = None
        self._exec_streak = 0
        self.progress = ProgressWatch()  # stalls and cycles (see progress.py)
        self.completion: tuple[bool, Any] | None = None  # run.complete(evidence) -> (True, evidence)
        self.stop_state: tuple[StopReason, str | None, str] | None = None
        self.outcome: RunOutcome | None = None
        self.closed = False  # the run has ended: work it started that outlives it is refused (see _check_open)
        self.near_crossed = False
        self.turns = 0  # model calls in this run tree, counted at the root
        self.chars_per_token = 4.0
        self.estimate_in_flight = False  # (root) a call reserved at the input estimate is in flight
        self.in_flight: Counter[int] = Counter()  # (root) admitted model calls not yet settled, by task or thread
        self.settled_count = 0  # (root) settlements so far; a refused call waits for it to change
        self.settled: threading.Condition = parent.root.settled if parent is not None else threading.Condition(self.lock)
        self.room_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []  # (root) asyncio waiters
        # The last request whose input count was reported: (digest of all but its messages, message digests, tokens).
        self.last_prompt: tuple[str, tuple[str, ...], int] | None = None
        self.summarize: Callable[[str, int], Any] | None = None
        self.holdback: dict[str, float] | None = None
        self.depth_refused = self._depth_exceeded()
        self.charges: dict[str, float] = {}  # USD charged by name
        # Approvals, denials and the pending call are shared by the run tree (see approval.py).
        self.approval: ApprovalState | None = parent.approval if parent is not None else None
        if self.approval is None and (budget.approve is not None or budget.on_limit == "pause"):
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
        self.limit_declined = False  # a person declined to raise a limit it paused at: nothing more is sent
        self.open_calls: set[Any] = set()  # calls admitted here and not settled yet (calls.Guard)

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

    def stop(
        self, reason: StopReason, limit: str | None, detail: str, *, by: RunNode | None = None, pausable: bool = True
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

    def _pause_at_limit(self, reason: StopReason, limit: str | None, detail: str, owner: RunNode) -> tuple[
            StopReason, str]:
        """A stop at one of `owner`'s own limits under `on_limit="pause"`: record the limit as what the run waits
        on and return (`awaiting_approval`, detail); any other stop is returned as it is."""
        if (limit not in LIMITS or LIMITS[limit][1] is not reason or owner.budget.on_limit != "pause"
                or getattr(owner.budget, limit, None) is None):
            return reason, detail
        from ..model.paused import PendingCall
        from .approval import ApprovalState

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

    def _stop_up_to(self, owner: RunNode, state: tuple[StopReason, str | None, str]) -> None:
        """Record `state` on every ancestor up to `owner` that has no stop yet."""
        for node in self.chain[1:]:
            if node.stop_state is None:
                node.stop_state = state
            if node is owner:
                return

    def _refuser(self, refusal: lg.Refusal, shared: bool) -> RunNode:
        """The run whose limit refused: the one holding the refusing account, or the outermost naming the scope."""
        if shared:
            named = [n for n in self.chain if any(s is not None and s.name == refusal.scope
                                                  for s in (n.budget.scope, *n.extra_scopes))]
            return named[-1] if named else self
        return next((n for n in self.chain if n.account is refusal.account), self)

    def _exhausted(self, dim: str) -> RunNode:
        """The nearest run of the chain whose own account is used up on `dim` (over its cap, for tool calls)."""
        floor = _EXHAUSTED_AT.get(dim, 0.0)
        return next((n for n in self.chain if n.account.headroom(dim) <= floor), self)

    def _refusal_error(self, refusal: lg.Refusal, what: str, shared: bool = False) -> BudgetExceeded:
        by = self._refuser(refusal, shared)
        if refusal.dim not in _DIM_REASON and refusal.message:  # the store refused for its own reason
            return self.stop(StopReason.ERROR, None, f"{what} was not sent: {refusal.message}.", by=by)
        reason, field = _DIM_REASON.get(refusal.dim, (StopReason.ERROR, refusal.dim))
        where = f" of run '{refusal.scope}'" if refusal.scope and refusal.scope != self.name else ""
        if shared:
            where = f" of the shared budget '{refusal.scope}'"
        detail = f"{what} was not sent: it would exceed {field}{where} ({refusal.describe()})."
        return self.stop(reason, field, detail, by=by, pausable=not shared)

    def _check_open(self, what: str) -> None:
        """Refuse work for a run that has ended (a thread it started outlived it): a closed run is never charged.

        The ended run's outcome is final; an open run below it (opened in that thread) records the stop.
        """
        ended = next((n for n in self.chain if n.closed), None)
        if ended is None:
            return
        detail = (f"{what} was not sent: the run '{ended.name}' it belongs to has already ended (the work was started "
                  "in the run, e.g. in a thread, and outlived it); wait for such work before the run ends, or start "
                  "it outside the run.")
        if ended is self:  # no open run of this work to catch it: it propagates as outside any run
            exc = BudgetExceeded(StopReason.CANCELLED, detail, outcome=self.outcome)
            exc.run_path = frozenset()  # type: ignore[attr-defined]
            raise exc
        raise self.stop(StopReason.CANCELLED, None, detail)

    def _deadline_owner(self) -> RunNode:
        """The run of the chain whose max_seconds ends first (the one whose time is up)."""
        timed = [n for n in self.chain if n.budget.max_seconds is not None]
        return min(timed, key=lambda n: n.started + (n.budget.max_seconds or 0.0), default=self)

    def _check_gates(self, what: str) -> None:
        """Raise BudgetExceeded for an ended run, depth, time and pending stops (repeat, tool calls)."""
        self._check_open(what)
        if self.depth_refused:
            raise self.stop(StopReason.DEPTH, "max_depth", f"{what} was not sent: {self.depth_refused}.")
        if self.deadline is not math.inf and time.monotonic() >= self.deadline + self._paused_chain():
            raise self.stop(StopReason.TIME, "max_seconds", f"{what} was not sent: the run's time is up.",
                            by=self._deadline_owner())
        if self.stop_state is not None and (self.stop_state[0] in _GATED_STOPS or self.limit_declined):
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
                self.stop(reason, field, f"the run has no {dim} left ({field}).", by=self._exhausted(dim))
                return False
        if lg.headroom(self.accounts, "tool_calls") < 0:
            self.stop(StopReason.TOOL_CALLS, "max_tool_calls", "the model requested more tool calls than allowed.",
                      by=self._exhausted("tool_calls"))
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
                    self.stop(reason, field, f"the shared budget '{scope.name}' has no {dim} left ({field}).",
                              pausable=False)
                    return False
        return True

    # --- model calls ------------------------------------------------------------------------------------

    def admit(
        self, provider: str, model: str, max_output: int | None, input_chars: Callable[[], int], choices: int = 1,
        prompt: tuple[dict[str, Any], str] | None = None,
    ) -> Admission:
        """Check and reserve one model call, or raise BudgetExceeded / UnknownPriceError; nothing is sent.

        `choices` answers (OpenAI `n`) each get up to `max_output` tokens. Input is reserved at the estimate
        for one call of the tree at a time; a call made while that one is in flight (or every call, with
        `Budget.strict`) reserves an upper bound: one token per character of the request body, or, when the
        request's messages (`prompt`: the body and its message-list key) extend the previous request's, what
        the server reported for that one plus one token per character of the new messages.
        """
        what = f"the call to {model}"
        self._check_gates(what)
        limited = self._limited()
        if "tool_calls" in limited and lg.headroom(self.accounts, "tool_calls") < 0:
            raise self.stop(
                StopReason.TOOL_CALLS, "max_tool_calls", f"{what} was not sent: the model requested more tool "
                "calls than max_tool_calls allows.", by=self._exhausted("tool_calls")
            )
        amounts: dict[str, float] = {"steps": 1.0}
        adm = Admission(self, amounts)
        if not limited - _COUNT_DIMS:
            self._reserve(adm, what)
            return adm
        # A small margin covers what the SDK adds to the body and the provider's message framing tokens.
        chars = input_chars()
        est_in = int(chars / self.root.chars_per_token * 1.05) + 8
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
        adm.estimated = self._take_estimate_slot()
        if not adm.estimated:
            # The body's JSON (non-ASCII escaped) has at least one character per UTF-8 byte of its text, and a
            # byte-level BPE token is at least one byte: an upper bound of the input tokens.
            est_in = self._input_bound(adm, chars, prompt)
        out = max_output
        input_cost = per_token = 0.0
        if pricing is not None:
            input_cost = pricing.cost(est_in, 0)
            if not adm.estimated:  # an upper bound prices every input token at the dearest input rate
                input_cost = max(input_cost, pricing.cost(est_in, 0, cache_read=est_in),
                                 pricing.cost(est_in, 0, cache_write=est_in))
            per_token = (pricing.cost(est_in, 1_000_000) - pricing.cost(est_in, 0)) / 1_000_000
        n = max(1, choices)
        if out is None:
            rooms = {
                "output_tokens": lg.headroom(self.accounts, "output_tokens"),
                "total_tokens": lg.headroom(self.accounts, "total_tokens") - est_in,
            }
            if per_token > 0:
                rooms["usd"] = (lg.headroom(self.accounts, "usd") - input_cost) / per_token
            adm.bound_by = min(rooms, key=lambda d: rooms[d])
            room = rooms[adm.bound_by] / n  # each of the n answers may write up to the limit
            if room <= AUTO_MAX_TOKENS_CEILING and self._auto_max_tokens():
                out = max(0, int(room))
                adm.set_max_tokens = out >= 1
            else:
                # room is infinite when only a shared scope limits output: reserve the default worst case there
                out = min(_UNBOUNDED_OUTPUT_RESERVE, int(room)) if room != math.inf else _UNBOUNDED_OUTPUT_RESERVE
        adm.max_output_tokens = out
        amounts["input_tokens"] = est_in
        amounts["output_tokens"] = out * n
        amounts["total_tokens"] = est_in + out * n
        if pricing is not None:
            amounts["usd"] = input_cost + out * n * per_token
        try:
            self._reserve(adm, what)
        except BaseException:
            self._free_estimate_slot(adm)
            raise
        if max_output is None and adm.max_output_tokens is not None and adm.max_output_tokens < 1:
            self.release(adm)
            dim = "usd" if pricing is not None and lg.headroom(self.accounts, "usd") < math.inf else "total_tokens"
            reason, field = _DIM_REASON[dim]
            raise self.stop(reason, field, f"{what} was not sent: the budget leaves no room for any output ({field}).")
        return adm

    def _input_bound(self, adm: Admission, chars: int, prompt: tuple[dict[str, Any], str] | None) -> int:
        """An upper bound of the call's input tokens. Chat formats tokenize each message apart, so a request that
        only appends messages to the previous one has at most its reported count plus the new messages' bytes.
        """
        bound = chars
        if prompt is None:
            return bound
        shape = _prompt_shape(*prompt)
        if shape is None:
            return bound
        adm.prompt_shape = shape
        last = self.last_prompt
        if last is not None and last[0] == shape[0] and shape[1][: len(last[1])] == last[1]:
            bound = min(bound, last[2] + sum(shape[2][len(last[1]):]) + 8)
        return bound

    def _take_estimate_slot(self) -> bool:
        """Whether this call may reserve its input at the estimate: one call of the tree at a time, never with
        `strict`. So the calls in flight hold at most one estimate's error, and a cap is exceeded by at most that.
        """
        if any(n.budget.strict for n in self.chain):
            return False
        root = self.root
        with self.lock:
            if root.estimate_in_flight:
                return False
            root.estimate_in_flight = True
            return True

    def _free_estimate_slot(self, adm: Admission) -> None:
        if adm.estimated:
            adm.estimated = False
            with self.lock:
                self.root.estimate_in_flight = False

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
        root = self.root
        settled = root.settled_count
        refusal = lg.reserve(self.accounts, adm.amounts, self.lock)
        while refusal is not None:
            # Only what other calls hold in flight may be in the way: wait for one of them to settle, re-check.
            how = self._may_wait(refusal, adm.amounts)
            if how is None:
                break
            if how == "task":
                raise RoomPending(self, settled)  # the async wrapper awaits `wait_settled` and admits again
            with root.settled:
                seen = settled
                root.settled.wait_for(lambda: root.settled_count != seen, timeout=self._wait_limit())  # noqa: B023
                if root.settled_count == settled:
                    break  # nothing settled in time: refuse
                settled = root.settled_count
            refusal = lg.reserve(self.accounts, adm.amounts, self.lock)
        if refusal is not None:
            raise self._refusal_error(refusal, what)
        if self.scopes:
            adm.shared = self._reserve_shared(adm.amounts, what, local=adm.amounts)
        if self.deadline is not math.inf:
            adm.timeout = max(0.001, self.time_left())
        with self.lock:
            root.turns += 1
            adm.turn = root.turns
            adm.thread = _holder()
            root.in_flight[adm.thread] += 1

    def _may_wait(self, refusal: lg.Refusal, amounts: dict[str, float]) -> str | None:
        """How a refused model call may wait for calls in flight ("thread" blocks, "task" awaits), or None.

        Only a caller that holds none of the tree's calls in flight waits (an asyncio task only when its
        adapter can await), and only when the call would fit once what they hold was settled (tokens and
        money: what a call in flight holds is its worst case, which its settlement may give back).
        """
        if refusal.dim not in _WAIT_DIMS or refusal.message or self.time_left() <= 0:
            return None
        holder = _holder()
        with self.lock:
            root = self.root
            mine = root.in_flight.get(holder, 0)
            if mine > 0 or sum(root.in_flight.values()) <= 0:
                return None
            dim, amount = refusal.dim, amounts.get(refusal.dim, 0.0)
            if any(acc.limits.get(dim, math.inf) < acc.used[dim] + amount - 1e-12 for acc in self.accounts):
                return None  # it does not fit even with nothing in flight
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return "thread"
        return "task" if _MAY_AWAIT_ROOM.get() else None  # blocking would stall the loop that runs the calls

    async def wait_settled(self, seen: int) -> bool:
        """Wait (in an asyncio task) until a call of the tree settles after `seen` settlements; False on timeout."""
        root = self.root
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiter = (loop, fut)
        with root.settled:
            if root.settled_count != seen:
                return True
            root.room_waiters.append(waiter)
        try:
            await asyncio.wait_for(fut, timeout=self._wait_limit())
            return True
        except TimeoutError:
            return False
        finally:
            with root.settled:
                if waiter in root.room_waiters:
                    root.room_waiters.remove(waiter)

    def _wait_limit(self) -> float:
        return max(0.0, min(_MAX_ADMISSION_WAIT, self.time_left()))

    def _done(self, adm: Admission) -> None:
        """The call of `adm` is no longer in flight: free what it held and wake calls waiting for room."""
        self._free_estimate_slot(adm)
        root = self.root
        with root.settled:
            if adm.thread is not None:
                left = root.in_flight[adm.thread] - 1
                if left > 0:
                    root.in_flight[adm.thread] = left
                else:
                    root.in_flight.pop(adm.thread, None)
                adm.thread = None
            root.settled_count += 1
            root.settled.notify_all()
            waiters, root.room_waiters = root.room_waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # its loop is closed
                pass

    def release(self, adm: Admission) -> None:
        """Give back a reservation whose call was never sent."""
        lg.settle(self.accounts, adm.amounts, {}, self.lock)
        self._settle_shared(adm.shared, {})
        self._done(adm)

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
        self._done(adm)
        if adm.shared:
            self._settle_shared(adm.shared, actual)
        if input_chars and input_tokens > 0:
            self.root.chars_per_token = min(8.0, max(1.0, input_chars / input_tokens))
            if adm.prompt_shape is not None:  # a reported count: the base of the next request's bound
                self.last_prompt = (adm.prompt_shape[0], adm.prompt_shape[1], input_tokens)
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

    def take_call_id(self, name: str, arguments: Any) -> str | None:
        """The call id the model gave a tool call with this name and arguments, once (None when unknown)."""
        key = f"{name}\x00{canonical_arguments(arguments)}"
        for node in self.chain:
            with self.lock:
                ids = node.requested_ids.get(key)
                if ids:
                    found = ids.pop(0)
                    if not ids:
                        del node.requested_ids[key]
                    return found
        return None

    def record_tool_requests(self, calls: list[tuple[Any, ...]]) -> None:
        """The model asked for these tools, as (name, arguments[, call id]): count them, watch for repetition
        and for calls that need a person's approval.
        """
        if not calls:
            return
        lg.settle(self.accounts, {}, {"tool_calls": float(len(calls))}, self.lock)
        self._charge_shared({"tool_calls": float(len(calls))})
        with self.lock:  # the tools of a child count in every ancestor's record (the wrap-up lists the tree's)
            for node in self.chain:
                node.tools_requested.update(name for name, *_ in calls)
        for name, args, *call_id in calls:
            if self.approval is not None:
                self.approval.on_request(self, name, args, call_id[0] if call_id else None)
            self.pending_tools[name] += 1
            key = f"{name}\x00{canonical_arguments(args)}"
            if call_id and call_id[0] and len(self.requested_ids) < 256:
                ids = self.requested_ids.setdefault(key, [])
                if len(ids) < 16:  # bounded: ids of calls no @tool runs directly are never taken
                    ids.append(str(call_id[0]))
            self._request_streak = self._request_streak + 1 if key == self._last_request else 1
            self._last_request = key
            limit = self.repeat_limit(name)
            with self.lock:
                self.progress.requested(name, call_id[0] if call_id else None)
                self.progress.requests.append((name, key))
            self._check_cycle(self.progress.requests, "the model requested", "the next model call was not sent")
            if limit is not None and self._request_streak >= limit and self.stop_state is None:
                self.stop_state = (
                    StopReason.REPEAT,
                    "max_repeats",
                    f"the model requested {name} with the same arguments {self._request_streak} times in a row "
                    f"({self.allowance([name], 'max_repeats', limit)}); the next model call was not sent.",
                )
        if lg.headroom(self.accounts, "tool_calls") < 0:
            self.stop(
                StopReason.TOOL_CALLS, "max_tool_calls",
                "the model requested more tool calls than max_tool_calls allows; the next call was not sent.",
                by=self._exhausted("tool_calls"),
            )
        self._check_near()

    def repeat_limit(self, name: str) -> int | None:
        """How many identical calls of `name` in a row stop the run: its poll allowance, else max_repeats."""
        polls = self.budget.polls
        return polls.get(name, self.budget.max_repeats)

    def stall_limit(self, name: str) -> int | None:
        """How many unchanged results of `name` in a row stop the run: its poll allowance, else max_stalls."""
        polls = self.budget.polls
        return polls.get(name, self.budget.max_stalls)

    def allowance(self, tools: list[str], field: str, cap: int) -> str:
        """How a stop's detail names the allowance it met: `polls['wait_for_ci']=20` when a poll of one of
        `tools` set `cap`, else `max_repeats=3` / `max_stalls=3` (`field`)."""
        polls = self.budget.polls
        poll = next((t for t in tools if polls.get(t) == cap), None)
        return f"polls[{poll!r}]={cap}" if poll is not None else f"{field}={cap}"

    def _cycle(self, history: list[tuple[str, str]]) -> tuple[list[str], int] | None:
        if self.budget.max_repeats is None and not self.budget.polls:
            return None
        limits: dict[str, int] = {"": self.budget.max_repeats or 1 << 30, **self.budget.polls}
        return find_cycle(history, limits)

    def _check_cycle(self, history: Any, who: str, then: str) -> None:
        """Record a `repeat` stop when the actions end with a cycle of 2 or 3 repeated max_repeats times."""
        if self.stop_state is not None:
            return
        cycle = self._cycle(list(history)[-64:])
        if cycle is not None:
            tools, cap = cycle
            self.stop_state = (
                StopReason.REPEAT, "max_repeats",
                f"{who} the cycle {' -> '.join(tools)} (the same actions with the same arguments) {cap} times in a "
                f"row ({self.allowance(tools, 'max_repeats', cap)}); {then}.",
            )

    def note_results(self, results: list[tuple[str | None, str | None, Any]], executed: bool = False) -> None:
        """Tool results seen (name or call id, result): the same result `max_stalls` times in a row from one
        tool, whatever its arguments, records a `stalled` stop, so the next model or tool call is refused."""
        for name, call_id, result in results:
            with self.lock:
                counted = self.progress.result(name, call_id, result, executed)
            if counted is None:
                continue
            tool, streak = counted
            limit = self.stall_limit(tool)
            if limit is not None and streak >= limit and self.stop_state is None:
                self.stop_state = (
                    StopReason.STALLED, "max_stalls",
                    f"{tool} returned the same result {streak} times in a row, whatever its arguments "
                    f"({self.allowance([tool], 'max_stalls', limit)}); the next call was not sent.",
                )

    def read_results(self, body: Any, key: str) -> None:
        """Count the newest tool results a request carries (see progress.newest_results); never raises."""
        if self.budget.max_stalls is None and not self.budget.polls:
            return
        try:
            results = newest_results(body, key)
        except Exception:  # noqa: BLE001 - an odd body is no evidence of a stall
            return
        if results:
            self.note_results(results)

    def note_tool_result(self, name: str, call_id: str | None, result: Any) -> None:
        """A tool executed here (`@tool`, a framework's tool node) returned `result`."""
        with self.lock:
            call_id = call_id or self.progress.answered(name)
        self.note_results([(name, call_id, result)], executed=True)

    def admit_tool(self, name: str, arguments: Any, cost_usd: float) -> dict[str, float]:
        """Check a tool execution before it runs; returns what it reserved."""
        what = f"the tool {name}"
        cost_usd = check_cost(cost_usd, f"the cost_usd of tool {name}")
        self._check_gates(what)
        if self.approval is not None:
            self.approval.on_execute(self, name, arguments)
        key = f"{name}\x00{canonical_arguments(arguments)}"
        streak = self._exec_streak + 1 if key == self._last_exec else 1
        limit = self.repeat_limit(name)
        cycle = self._cycle([*list(self.progress.executions)[-64:], (name, key)])
        if cycle is not None:
            tools, cap = cycle
            raise self.stop(
                StopReason.REPEAT, "max_repeats",
                f"{what} was not run: it would complete the cycle {' -> '.join(tools)} (the same actions with the "
                f"same arguments) {cap} times in a row ({self.allowance(tools, 'max_repeats', cap)}).",
            )
        if limit is not None and streak >= limit:
            raise self.stop(
                StopReason.REPEAT,
                "max_repeats",
                f"{what} was not run: it would run with the same arguments {streak} times in a row "
                f"({self.allowance([name], 'max_repeats', limit)}).",
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
        with self.lock:
            self.progress.executions.append((name, key))
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
        with self.lock:
            for node in self.chain:
                node.tools_executed[name] += 1
        self._check_near()

    def charge(self, usd: float, name: str = "charge") -> None:
        """Charge a cost no instrumented client reports (a browser, a paid API); it counts against max_usd."""
        usd = check_cost(usd, "charge(usd=...)")
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

