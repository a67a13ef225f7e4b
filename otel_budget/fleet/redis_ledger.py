"""`RedisLedger`: shared (fleet) budgets in Redis, one atomic Lua round trip per decision.

    import otel_budget
    otel_budget.instrument(ledger=otel_budget.RedisLedger("redis://ledger:6379/0", fail="closed"))
    fleet = otel_budget.Scope(name="nightly-invoices", max_usd=50, window_seconds=86400)
    with otel_budget.run("invoice-agent", budget=otel_budget.Budget(max_usd=0.80, scope=fleet)):
        ...  # every call reserves in the run tree AND in the fleet scope, in every process on this Redis

A reservation lives `reservation_ttl` seconds at most, so the reservations of a crashed process expire and
a fleet never deadlocks on ghosts. Settles are idempotent by id: a retried settle is a no-op, and a settle
of an expired reservation still adds the usage exactly once. The client makes a reservation's id before
sending it, so a reserve that timed out (Redis may have run it, or may run it later) is released by id as
soon as Redis answers again, before the next decision; a release that reaches Redis before its reserve
leaves a tombstone, and the late reserve then holds nothing.

A scope has one cap in the store: every caller sends its own definition (the Scope's limits and window) with
each reservation, Redis keeps every distinct definition it has seen and applies the tightest of them (per
dimension the lowest limit, the longest window, no window if one definition has none). Tightest rather than
first stored, because a user who trusts the brake with money expects that no deployment can spend more than
the cap that any deployment declared; the first stored one would let an old, looser deployment decide. A
conflicting definition is logged once per scope and definition, and `detail()` shows them all. Raising a cap
is an explicit decision: `forget_definitions(scope)` (otherwise the stored definitions stay with the scope).

When Redis cannot be reached, `fail="closed"` refuses the call (stop reason `error`, with a message naming the
ledger) and `fail="open"` lets it through on a process-local ledger, marked as not enforced (span attribute and
the `otel_budget.ledger.fail_open` metric); usage counted while Redis was away is pushed to Redis once it
answers again.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from ..core.ledger import DIMS, MemoryLedger, Refusal, Reservation
from . import _redis_scripts as lua

log = logging.getLogger(__name__)

#: Scopes whose name starts with this are ad-hoc run trees (see `propagation`); they expire when idle.
TREE_SCOPE_PREFIX = "run:"
_LOCAL = "local:"


class LedgerUnavailable(ConnectionError):
    """The shared ledger could not be reached (raised by `read`; reserve and settle follow `fail`)."""


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<redis url>"


def _encode(amounts: Mapping[str, float]) -> str:
    return " ".join(f"{dim} {float(value)!r}" for dim, value in amounts.items() if value == value)


def _window_ms(window: float | None) -> int:
    """A window in ms; 0 when there is none (an infinite window is none: the counters never start anew)."""
    return int(window * 1000) if window and math.isfinite(window) else 0


def definition(limits: Mapping[str, float], window: float | None = None) -> str:
    """A scope's definition as the store keeps it: "dim value ..." (dims sorted), then "_window ms" if any."""
    text = _encode(dict(sorted(limits.items())))
    ms = _window_ms(window)
    return f"{text} _window {ms}".strip() if ms else text


def _parse_definition(text: str) -> dict[str, float]:
    parts = text.split()
    out = {dim: float(value) for dim, value in zip(parts[::2], parts[1::2], strict=False)}
    if "_window" in out:
        out["window_seconds"] = out.pop("_window") / 1000
    return out


class RedisLedger:
    """A `LedgerStore` on Redis (single server or Cluster); see the module docstring.

    `url`: a redis:// or rediss:// URL (or pass a ready `client`, e.g. a `redis.cluster.RedisCluster`).
    `fail`: "closed" refuses calls while Redis is unreachable, "open" lets them through unenforced.
    `reservation_ttl`: seconds a reservation is held at most (longer than your slowest model call).
    `socket_timeout`: seconds to wait for Redis per attempt (connect and reply); one retry after a reset.
    `retry_interval`: after a connection failure, seconds during which calls go straight to `fail`
    instead of waiting for Redis again (so an unreachable Redis never slows every call).
    `settle_memory`: seconds a settle id is remembered, so a retry within that time is a no-op (at least
    `reservation_ttl`: a released reservation's id is remembered as long, as a tombstone for a late reserve).
    `tree_ttl`: idle seconds after which the keys of an ad-hoc run-tree scope (`run:...`) expire.
    `paused_ttl`: seconds the record of a paused run is kept (a paused run is resumable that long).
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "otel_budget",
        fail: Literal["closed", "open"] = "closed",
        reservation_ttl: float = 300.0,
        socket_timeout: float = 0.25,
        retry_interval: float = 1.0,
        settle_memory: float = 600.0,
        tree_ttl: float = 86400.0,
        paused_ttl: float = 30 * 86400.0,
        cluster: bool = False,
        client: Any = None,
    ) -> None:
        if fail not in ("closed", "open"):
            raise ValueError(f"fail must be 'closed' or 'open', not {fail!r}")
        if reservation_ttl <= 0 or socket_timeout <= 0 or settle_memory <= 0:
            raise ValueError("reservation_ttl, socket_timeout and settle_memory must be positive")
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        self.prefix = prefix
        self.fail = fail
        self.reservation_ttl = reservation_ttl
        self.retry_interval = retry_interval
        self._ttl_ms = int(reservation_ttl * 1000)
        self._remember_ms = int(max(settle_memory, reservation_ttl) * 1000)
        self._tree_ms = int(tree_ttl * 1000)
        self._paused_ms = int(paused_ttl * 1000)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._down_errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError, OSError)
        if client is None:
            kwargs: dict[str, Any] = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
            if cluster:
                from redis.cluster import RedisCluster

                client = RedisCluster.from_url(url, **kwargs)
            else:
                client = redis.Redis.from_url(url, retry=Retry(NoBackoff(), 1), health_check_interval=0, **kwargs)
        self.client = client
        # register_script: EVALSHA, and after a Redis restart (NOSCRIPT) the script is loaded again.
        self._reserve = client.register_script(lua.RESERVE)
        self._settle = client.register_script(lua.SETTLE)
        self._read = client.register_script(lua.READ)
        self._node = os.urandom(6).hex()
        self._ids = itertools.count(1)
        self._local = MemoryLedger()
        self._down_until = 0.0
        self._last_error: BaseException | None = None
        self._backlog: collections.deque[tuple[str, str, str, str]] = collections.deque(maxlen=100_000)
        self._warned = False
        self._conflicts: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisLedger({redact(self.url)!r}, prefix={self.prefix!r}, fail={self.fail!r})"

    # --- keys and calls -------------------------------------------------------------------------------

    def keys(self, scope: str) -> list[str]:
        """The six keys of a scope; they share the hash tag `{prefix:scope}` (one Cluster slot)."""
        base = "{" + f"{self.prefix}:{scope}" + "}"
        return [f"{base}:used", f"{base}:held", f"{base}:res", f"{base}:exp", f"{base}:done", f"{base}:def"]

    def record_key(self, scope: str, kind: str) -> str:
        """The key of a record kept beside a scope's counters (same hash tag): `{prefix:scope}:kind`."""
        return "{" + f"{self.prefix}:{scope}" + "}:" + kind

    def put_record(self, scope: str, kind: str, text: str) -> None:
        """Keep `text` (canonical JSON) as the authoritative record of a run tree ("tree") or a paused run
        ("paused"); it expires after `tree_ttl` or `paused_ttl`. Raises LedgerUnavailable."""
        ttl = self._paused_ms if kind == "paused" else self._tree_ms
        try:
            self.client.set(self.record_key(scope, kind), text, px=max(1, ttl))
        except self._errors as exc:
            raise LedgerUnavailable(self._unreachable(exc)) from exc

    def get_record(self, scope: str, kind: str, *, refresh: bool = False) -> str | None:
        """The record kept by `put_record`, or None when there is none; `refresh` restarts its expiry (a tree
        in use). Raises LedgerUnavailable."""
        key = self.record_key(scope, kind)
        try:
            value = self.client.get(key)
            if refresh and value is not None:
                self.client.pexpire(key, max(1, self._paused_ms if kind == "paused" else self._tree_ms))
        except self._errors as exc:
            raise LedgerUnavailable(self._unreachable(exc)) from exc
        return None if value is None else _text(value)

    def _idle_ms(self, scope: str) -> int:
        return self._tree_ms if scope.startswith(TREE_SCOPE_PREFIX) else 0

    def _new_id(self) -> str:
        return f"{self._node}:{next(self._ids)}"

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call, after the settles and releases kept while Redis was away (so this decision sees
        them); a connection failure opens the breaker for `retry_interval` seconds."""
        if time.monotonic() < self._down_until:
            raise LedgerUnavailable(f"{self._last_error} (not retried for {self.retry_interval:g} s)")
        try:
            if self._backlog:
                self._flush()
            result = script(keys=keys, args=args, client=self.client)
        except self._down_errors as exc:
            self._down_until = time.monotonic() + self.retry_interval
            self._last_error = exc
            raise
        if self._warned:
            self._warned = False
            log.warning("otel-budget: the shared ledger at %s answers again", redact(self.url))
        return result

    def _unreachable(self, exc: BaseException) -> str:
        return f"the shared ledger at {redact(self.url)} is unreachable (fail={self.fail!r}): {exc}"

    def _warn(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("otel-budget: %s", self._unreachable(exc))

    # --- LedgerStore ----------------------------------------------------------------------------------

    def reserve(
        self, scope: str, amounts: Mapping[str, float], limits: Mapping[str, float], *, window: float | None = None
    ) -> Reservation | Refusal:
        """Hold `amounts` in `scope` if they fit its cap (one round trip), or say why not.

        The cap is the tightest of `limits` (with `window`) and every other definition stored for the scope.
        """
        rid = self._new_id()
        mine = definition(limits, window)
        args = [rid, self._ttl_ms, _window_ms(window), _encode(amounts), mine, self._idle_ms(scope)]
        try:
            result = self._run(self._reserve, self.keys(scope), args)
        except self._errors as exc:
            self._warn(exc)
            if isinstance(exc, self._down_errors) and not isinstance(exc, LedgerUnavailable):
                # no reply, but Redis may have run the script or may still run it: release the id once it answers
                self._backlog.append((scope, rid, rid, ""))
            if self.fail == "closed":
                return Refusal("ledger", 0.0, 0.0, 0.0, scope, message=self._unreachable(exc))
            local = self._local.reserve(scope, amounts, limits, window=window)
            if isinstance(local, Refusal):
                return local
            return Reservation(scope, _LOCAL + local.id, dict(amounts), enforced=False)
        status = _text(result[0])
        if len(result) in (2, 6):  # the definition in force is not this caller's
            self._conflict(scope, mine, _text(result[-1]))
        if status == "1":
            return Reservation(scope, rid, dict(amounts))
        if status == "2":  # cannot happen for a fresh id; said plainly rather than held
            return Refusal("ledger", 0.0, 0.0, 0.0, scope, message=f"reservation {rid} was already released")
        dim, limit, taken, requested = (_text(x) for x in result[1:5])
        return Refusal(dim, float(limit), float(taken), float(requested), scope)

    def _conflict(self, scope: str, mine: str, cap: str) -> None:
        """Log once per scope and definition that another definition of the scope is tighter than this one."""
        key = (scope, mine)
        if key in self._conflicts:
            return
        self._conflicts.add(key)
        log.warning(
            "otel-budget: the shared scope %r is defined differently elsewhere; the tightest definition applies: "
            "%s (this process: %s). Give every deployment the same Scope, or call "
            "RedisLedger.forget_definitions(%r) to drop the stored ones.",
            scope, _describe(cap), _describe(mine), scope,
        )

    def settle(self, reservation: Reservation, actual: Mapping[str, float]) -> None:
        """Replace the reservation by `actual` exactly once; an empty id just adds `actual` (a charge)."""
        rid = reservation.id
        if rid.startswith(_LOCAL):
            self._local.settle(Reservation(reservation.scope, rid[len(_LOCAL):], reservation.amounts), actual)
            rid = ""
            if not any(actual.values()):
                return
        sid = rid or self._new_id()
        self._apply(reservation.scope, rid, sid, _encode(actual))

    def release(self, reservation: Reservation) -> None:
        """Give the reservation back unused."""
        self.settle(reservation, {})

    def read(self, scope: str) -> dict[str, float]:
        """Used plus reserved per dimension (live reservations only); raises LedgerUnavailable."""
        detail = self.detail(scope)
        return {dim: detail["used"][dim] + detail["reserved"][dim] for dim in DIMS}

    def detail(self, scope: str) -> dict[str, Any]:
        """A scope in the current window: `used` and `reserved` ({dim: value}), `limits` (the cap in force:
        {dim: value}, plus `window_seconds` when windowed; empty before the first reservation), `definitions`
        (every distinct definition callers sent, same shape) and `conflict` (more than one definition)."""
        try:
            raw = self._run(self._read, self.keys(scope), list(DIMS))
        except self._errors as exc:
            raise LedgerUnavailable(self._unreachable(exc)) from exc
        n = 2 * len(DIMS)
        values = [float(_text(x)) for x in raw[:n]]
        definitions = sorted((_text(x) for x in raw[n + 1:]), key=lambda d: (len(d), d))
        return {
            "used": {dim: values[2 * i] for i, dim in enumerate(DIMS)},
            "reserved": {dim: values[2 * i + 1] for i, dim in enumerate(DIMS)},
            "limits": _parse_definition(_text(raw[n])) if len(raw) > n else {},
            "definitions": [_parse_definition(d) for d in definitions],
            "conflict": len(definitions) > 1,
        }

    def forget_definitions(self, scope: str) -> None:
        """Drop the stored definitions of `scope` (e.g. to raise its cap): the next reservations define it anew."""
        try:
            self.client.delete(self.keys(scope)[5])
        except self._errors as exc:
            raise LedgerUnavailable(self._unreachable(exc)) from exc
        self._conflicts = {key for key in self._conflicts if key[0] != scope}

    # --- settles that could not reach Redis -----------------------------------------------------------

    @property
    def pending(self) -> int:
        """Settles waiting for Redis to answer again."""
        return len(self._backlog)

    def _apply(self, scope: str, rid: str, sid: str, actual: str) -> None:
        try:
            self._run(self._settle, self.keys(scope), [rid, sid, 0, actual, self._remember_ms, self._idle_ms(scope)])
        except self._errors as exc:
            self._warn(exc)
            self._backlog.append((scope, rid, sid, actual))

    def _flush(self, batch: int = 100) -> None:
        """Push up to `batch` settles and releases kept while Redis was away, in order (idempotent by settle id).

        Stops at a failure; a connection failure is raised (the caller opens the breaker)."""
        with self._lock:
            for _ in range(batch):
                if not self._backlog:
                    return
                scope, rid, sid, actual = self._backlog[0]
                args = [rid, sid, 0, actual, self._remember_ms, self._idle_ms(scope)]
                try:
                    self._settle(keys=self.keys(scope), args=args, client=self.client)
                except self._down_errors:
                    raise
                except self._errors:
                    return
                self._backlog.popleft()

    def flush(self) -> int:
        """Try now to push the settles and releases kept while Redis was away; returns how many still wait."""
        self._down_until = 0.0
        try:
            self._flush(batch=len(self._backlog))
        except self._errors:
            pass
        return len(self._backlog)

    def close(self) -> None:
        """Close the connections."""
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _describe(text: str) -> str:
    """A stored definition for people: "steps=10, usd=0.5, window_seconds=86400" ("no limits" when empty)."""
    return ", ".join(f"{k}={v:g}" for k, v in _parse_definition(text).items()) or "no limits"
