"""The state of one run in the tree (its budget, its account, what it saw) and the pieces every layer of
`RunNode` shares: the admission record, the local shared-scope store, run ids.

`RunNode` (node.py) is built in layers, each in its own module and each on the one below:
`NodeState` here, then stops.py, in_flight.py, settlement.py, admission.py and watch.py.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.budget import LIMITS, Budget, StopReason
from ..model.outcome import RunOutcome
from . import ledger as lg
from .approval import ApprovalState
from .progress import ProgressWatch

if TYPE_CHECKING:
    from typing_extensions import Self

    from .pricing import ModelPricing

#: The shared-scope store when `instrument(ledger=...)` names none: scopes shared within this process.
_LOCAL_STORE = lg.MemoryLedger()
_ids = itertools.count(1)
#: A factor just below 1: `used >= limit * near * _BELOW` holds whenever `used / limit >= near` does, whatever the
#: rounding of either side, so the division is only done near the threshold.
_BELOW = 1 - 1e-9

#: Ledger dimension -> (stop reason, Budget field).
_DIM_REASON: dict[str, tuple[StopReason, str]] = {dim: (reason, f) for f, (dim, reason, _) in LIMITS.items()}


class Admission:
    """What a call reserved; settle or release it exactly once."""

    __slots__ = (
        "node", "amounts", "max_output_tokens", "set_max_tokens", "turn", "input_estimate", "shared",
        "bound_by", "estimated", "prompt_shape", "thread", "no_tools", "pricing",
    )

    def __init__(self, node: NodeState, amounts: dict[str, float]) -> None:
        self.node = node
        self.amounts = amounts
        self.shared: list[lg.Reservation] = []
        self.max_output_tokens: int | None = None
        self.set_max_tokens = False
        self.bound_by = "output_tokens"  # the ledger dimension that set the output limit (when set_max_tokens)
        self.turn = 0
        self.input_estimate = 0
        self.estimated = False  # input reserved at the estimate (the tree's one such call in flight), not the bound
        self.prompt_shape: tuple[str, tuple[str, ...], tuple[int, ...]] | None = None  # see _prompt_shape
        self.thread: int | None = None  # the task or thread that holds the call in flight (None once settled)
        self.no_tools = False  # no tool call remains (max_tool_calls): the call goes without tools, so it can answer
        self.pricing: ModelPricing | None = None  # the model's price, when a money cap made the admission look it up


class NodeState:
    """A run's budget, accounts, counters and place in the tree, with the readers of its limits and time."""

    def __init__(self, name: str, budget: Budget, parent: Self | None) -> None:
        self.id = next(_ids)
        self.name = name
        self.budget = budget
        self.parent = parent
        self.conversation_id: str | None = parent.conversation_id if parent is not None else None
        self.root: Self = parent.root if parent is not None else self
        self.depth: int = parent.depth + 1 if parent is not None else 1
        self.account = lg.Account(budget.limits(), name=name)
        #: The positive limits of the run's own account (fixed for its life), read by `near_reached`: (dimension,
        #: limit, a use just below limit * near, under which used / limit cannot reach near).
        near = budget.near
        self._near_limits = tuple((dim, limit, limit * near * _BELOW)
                                  for dim, limit in self.account.limits.items() if limit > 0)
        if self._near_limits:  # the ledger says when a settlement's use reaches one of them (see near_reached)
            self.account.marks = marks = dict.fromkeys(lg.DIMS, math.inf)
            marks.update((dim, below) for dim, _, below in self._near_limits)
        #: The same for the run's time: (max_seconds, just below max_seconds * near), or None.
        self._near_seconds = (None if budget.max_seconds is None
                              else (budget.max_seconds, budget.max_seconds * near * _BELOW))
        self.chain: tuple[Self, ...] = (self, *(parent.chain if parent is not None else ()))
        self.accounts = tuple(n.account for n in self.chain)
        self.path = frozenset(n.id for n in self.chain)
        self.strict = any(n.budget.strict for n in self.chain)  # every input reserved at its bound (Budget.strict)
        #: Whether the enforcer may set a request's output limit (Budget.auto_max_tokens in every run of the chain).
        self.auto_max_tokens = all(n.budget.auto_max_tokens for n in self.chain)
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
        self.tool_calls_refused = 0  # tool calls the model requested beyond max_tool_calls (never counted as used)
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
        #: (root) [True] while no call reserved at the input estimate is in flight; [] while one is (see in_flight.py)
        self.estimate_slot: list[bool] = [True]
        self.in_flight: Counter[int] = Counter()  # (root) admitted model calls not yet settled, by task or thread
        self.settled_count = 0  # (root) settlements so far; a refused call waits for it to change
        self.threads_waiting = 0  # (root) threads blocked on `settled` (a settlement notifies only when any)
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

    def near_reached(self, dims: bool = True) -> bool:
        """`utilization_max() >= budget.near`, without building the utilization (asked after every settlement): a
        use below its threshold is far (one comparison), one at or above it is divided as `utilization` divides.
        Without `dims` only the time is looked at (a settlement whose uses reached no mark of the account)."""
        if dims:
            used = self.account.used
            for dim, limit, below in self._near_limits:
                if used[dim] >= below and used[dim] / limit >= self.budget.near:
                    return True
        seconds = self._near_seconds
        if seconds is None:
            return False
        elapsed = time.monotonic() - self.started - self.paused_seconds
        return elapsed >= seconds[1] and elapsed / seconds[0] >= self.budget.near

    def _paused_chain(self) -> float:
        paused = 0.0
        for node in self.chain:
            if node.paused_seconds > paused:
                paused = node.paused_seconds
        return paused

    def time_left(self) -> float:
        return self.deadline + self._paused_chain() - time.monotonic()

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

    trace_id: str | None = None
    span_id: str | None = None
