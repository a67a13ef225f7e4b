"""Counters and reservations, thread- and asyncio-safe, and the store interface for shared budgets.

A call first *reserves* its worst case on every limited dimension of every account it draws from (its run
and all the run's ancestors, plus a shared fleet scope when one is configured). The reservation either fits
everywhere or nowhere. After the call, the reservation is *settled* to what was really used.

Nothing here awaits or blocks on I/O, so one `threading.Lock` makes it safe for threads and asyncio tasks.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

#: Every dimension a ledger counts. `seconds` is not counted: it is the wall clock.
DIMS: tuple[str, ...] = ("steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens", "usd")

#: Slack for float comparisons of money.
_EPS = 1e-12


@dataclass(slots=True)
class Refusal:
    """Why a reservation did not fit: the dimension, its limit, what was used and reserved, what was asked."""

    dim: str
    limit: float
    used: float
    requested: float
    scope: str = ""
    message: str = ""
    """Set by a store that refuses for its own reason (e.g. unreachable with fail="closed")."""
    account: Account | None = field(default=None, repr=False, compare=False)
    """The account that refused, when `reserve` checked it (identifies the run whose limit it is)."""

    def describe(self) -> str:
        if self.message:
            return self.message
        return (
            f"{self.dim}: {_fmt(self.used)} used or reserved of {_fmt(self.limit)}, "
            f"the next call needs up to {_fmt(self.requested)}"
        )


def _fmt(value: float) -> str:
    """One number format for every message: 31,298 / 2.5 / 0.0041 (never 2.929e+04)."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.6g}"


@dataclass(slots=True)
class Account:
    """Counters of one run (or one shared scope) with its limits."""

    limits: dict[str, float]
    used: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMS, 0.0))
    reserved: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMS, 0.0))
    name: str = ""
    marks: dict[str, float] | None = None
    """Levels of use watched by `settle_locked` (every dimension: its level, inf where none), which says when a
    use it adds reaches one (a run's near-cap threshold); None: none watched."""

    def headroom(self, dim: str) -> float:
        """What remains on `dim` after use and reservations (infinite when unlimited)."""
        limit = self.limits.get(dim)
        if limit is None:
            return float("inf")
        return limit - self.used[dim] - self.reserved[dim]

    def utilization(self) -> dict[str, float]:
        """used / limit per limited dimension (reservations not included)."""
        return {dim: self.used[dim] / limit for dim, limit in self.limits.items() if limit > 0}


def reserve(accounts: Sequence[Account], amounts: Mapping[str, float], lock: threading.Lock) -> Refusal | None:
    """Reserve `amounts` on every account at once, or on none; returns the first refusal."""
    with lock:
        return reserve_locked(accounts, amounts)


def reserve_locked(accounts: Sequence[Account], amounts: Mapping[str, float]) -> Refusal | None:
    """`reserve` for a caller that holds the accounts' lock."""
    items = amounts.items()
    for acc in accounts:
        limits, used, reserved = acc.limits, acc.used, acc.reserved
        for dim, amount in items:
            # (a NaN amount, taken or limit refuses: it is never room)
            if not amount <= 0 and (limit := limits.get(dim)) is not None \
                    and not used[dim] + reserved[dim] + amount <= limit + _EPS:
                return Refusal(dim, limit, used[dim] + reserved[dim], amount, acc.name, account=acc)
    for acc in accounts:
        reserved = acc.reserved
        for dim, amount in items:
            reserved[dim] += amount
    return None


def settle(
    accounts: Sequence[Account],
    reserved: Mapping[str, float],
    actual: Mapping[str, float],
    lock: threading.Lock,
) -> bool:
    """Replace a reservation by what was really used (a release when `actual` is empty); True when a use reached
    one of an account's marks."""
    with lock:
        return settle_locked(accounts, reserved, actual)


def settle_locked(accounts: Sequence[Account], reserved: Mapping[str, float], actual: Mapping[str, float]) -> bool:
    """`settle` for a caller that holds the accounts' lock."""
    reached = False
    for acc in accounts:
        res, used, marks = acc.reserved, acc.used, acc.marks
        for dim, amount in reserved.items():
            left = res[dim] - amount
            res[dim] = left if left > 0.0 else 0.0  # never below zero (a NaN gives 0.0, as max(0.0, nan))
        if marks is None:
            for dim, amount in actual.items():
                used[dim] += amount
        else:
            for dim, amount in actual.items():
                used[dim] = now = used[dim] + amount
                if now >= marks[dim]:
                    reached = True
    return reached


def take(accounts: Sequence[Account], dim: str, want: int, lock: threading.Lock) -> int:
    """Count up to `want` whole units of `dim` as used on every account at once, as many as all have room for;
    returns how many were counted (the rest do not fit and are not counted)."""
    with lock:
        room = headroom(accounts, dim)
        taken = want if room >= want else int(room) if room > 0 else 0
        if taken:
            for acc in accounts:
                acc.used[dim] += taken
    return taken


def headroom(accounts: Sequence[Account], dim: str) -> float:
    """The smallest headroom on `dim` over `accounts` (as `min(acc.headroom(dim) ...)`, asked several times a call)."""
    room = math.inf
    for acc in accounts:
        limit = acc.limits.get(dim)
        if limit is not None and (here := limit - acc.used[dim] - acc.reserved[dim]) < room:
            room = here
    return room


def output_rooms(accounts: Sequence[Account]) -> tuple[float, float, float]:
    """`headroom` of output_tokens, total_tokens and usd, in one pass (what bounds a call's output)."""
    out = total = usd = math.inf
    for acc in accounts:
        limits, used, reserved = acc.limits, acc.used, acc.reserved
        if (limit := limits.get("output_tokens")) is not None \
                and (here := limit - used["output_tokens"] - reserved["output_tokens"]) < out:
            out = here
        if (limit := limits.get("total_tokens")) is not None \
                and (here := limit - used["total_tokens"] - reserved["total_tokens"]) < total:
            total = here
        if (limit := limits.get("usd")) is not None and (here := limit - used["usd"] - reserved["usd"]) < usd:
            usd = here
    return out, total, usd


# --- shared budgets -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reservation:
    """A reservation held in a store: settle or release it exactly once."""

    scope: str
    id: str
    amounts: dict[str, float]
    enforced: bool = True
    """False when a store let the call through without its shared cap (fail="open" while unreachable)."""


@runtime_checkable
class LedgerStore(Protocol):
    """Where shared (fleet) budgets live. Each method is one atomic decision.

    `limits` are sent with every reservation so a store needs no configuration per scope; `window` (seconds)
    makes the scope's counters start anew every `window` seconds (a wall-clock budget such as "tonight").
    """

    def reserve(
        self, scope: str, amounts: Mapping[str, float], limits: Mapping[str, float], *, window: float | None = None
    ) -> Reservation | Refusal: ...

    def settle(self, reservation: Reservation, actual: Mapping[str, float]) -> None: ...

    def release(self, reservation: Reservation) -> None: ...

    def read(self, scope: str) -> dict[str, float]: ...


_Definition = tuple[tuple[tuple[str, float], ...], float | None]


def tightest(definitions: Iterable[_Definition]) -> tuple[dict[str, float], float | None]:
    """The one cap of a scope defined several ways: per dimension the lowest limit, the longest window (none
    when one definition has none, since then the counters never start anew)."""
    limits: dict[str, float] = {}
    windows: list[float | None] = []
    for items, window in definitions:
        for dim, value in items:
            limits[dim] = min(value, limits.get(dim, math.inf))
        windows.append(window)
    window = None if not windows or None in windows else max(w for w in windows if w is not None)
    return limits, window


class MemoryLedger:
    """The in-process store: shared scopes for every run of this process.

    A scope has one cap, the tightest of every definition callers sent (as in `RedisLedger`, which says why);
    a second definition of a scope is logged once as a warning.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[str, tuple[Account, float]] = {}
        self._ids = itertools.count(1)
        self._definitions: dict[str, dict[_Definition, None]] = {}
        self._caps: dict[str, tuple[dict[str, float], float | None]] = {}

    def _define(self, scope: str, limits: Mapping[str, float], window: float | None) -> tuple[dict[str, float], float | None]:
        if window is not None and not math.isfinite(window):
            window = None
        key: _Definition = (tuple(sorted((dim, float(v)) for dim, v in limits.items())), window)
        seen = self._definitions.setdefault(scope, {})
        if key not in seen:
            seen[key] = None
            self._caps[scope] = cap = tightest(seen)
            if len(seen) > 1:
                _log.warning(
                    "otel-budget: the shared scope %r got another definition (%s); the tightest applies: %s",
                    scope, _describe(dict(key[0]), window), _describe(*cap),
                )
        return self._caps[scope]

    def _account(self, scope: str, limits: Mapping[str, float], window: float | None) -> Account:
        now = time.time()
        limits, window = self._define(scope, limits, window)
        entry = self._scopes.get(scope)
        if entry is None or (window is not None and now - entry[1] >= window):
            acc = Account(dict(limits), name=scope)
            self._scopes[scope] = (acc, now if window is None else now - now % window)
            return acc
        acc = entry[0]
        acc.limits = dict(limits)
        return acc

    def reserve(
        self, scope: str, amounts: Mapping[str, float], limits: Mapping[str, float], *, window: float | None = None
    ) -> Reservation | Refusal:
        with self._lock:
            acc = self._account(scope, limits, window)
        refusal = reserve([acc], amounts, self._lock)
        if refusal is not None:
            return refusal
        return Reservation(scope, str(next(self._ids)), dict(amounts))

    def settle(self, reservation: Reservation, actual: Mapping[str, float]) -> None:
        entry = self._scopes.get(reservation.scope)
        if entry is not None:
            settle([entry[0]], reservation.amounts, actual, self._lock)

    def release(self, reservation: Reservation) -> None:
        self.settle(reservation, {})

    def read(self, scope: str) -> dict[str, float]:
        entry = self._scopes.get(scope)
        if entry is None:
            return dict.fromkeys(DIMS, 0.0)
        acc = entry[0]
        with self._lock:
            return {dim: acc.used[dim] + acc.reserved[dim] for dim in DIMS}


_log = logging.getLogger(__name__)


def _describe(limits: Mapping[str, float], window: float | None) -> str:
    text = ", ".join(f"{dim}={value:g}" for dim, value in limits.items()) or "no limits"
    return text if window is None else f"{text}, window_seconds={window:g}"
