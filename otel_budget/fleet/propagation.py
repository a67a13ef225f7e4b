"""Run trees across processes: carry a run's identity and remaining budget to a worker.

In the coordinator, inside a run::

    token = otel_budget.propagation.export_run()        # a short string: send it with the task
    # or, over HTTP: headers = otel_budget.propagation.inject({})   (traceparent + baggage)

In the worker (another process or machine, with the same `instrument(ledger=RedisLedger(...), secret=...)`)::

    token = otel_budget.propagation.extract(request.headers)   # signed tokens only; or the string itself
    with otel_budget.propagation.attach_run(token, name="worker") as run:
        ...  # calls are charged to the coordinator's tree and traced under its run span

How it works: the first `export_run()` of a run moves what the run (and its ancestors) still have left into
an ad-hoc scope of the shared store, named `run:<trace id>:<random>`. From then on the coordinator's calls and
every attached worker's calls reserve in that scope too, so together they can never spend more than the
run had left when it was exported. The token also carries the W3C trace context of the run span (the
worker's run span becomes its child, in the same trace), the deadline of `max_seconds`, and the fleet
scopes the run draws from. A worker's local run starts with the remaining limits as its own budget (a
`budget` given to `attach_run` can only narrow them). Without a shared store (`instrument(ledger=...)`)
the tree scope lives in the process only, so the sharing holds between threads, not processes.

Trust: a token is checked field by field (`tokens`), signed when a secret is configured, and with a
`RedisLedger` the first export records the tree's quota, deadline and fleet scopes in Redis: a worker takes
its tree cap and fleet scopes from that record, whatever its token says (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..core import config
from ..core import ledger as lg
from ..core.run import Run, RunNode, current_run
from ..model.budget import LIMITS, Budget, Scope
from ..model.trust import InvalidRunState, amount, canonical
from ..telemetry import semconv as sc
from . import tokens
from .redis_ledger import TREE_SCOPE_PREFIX, LedgerUnavailable, RedisLedger
from .tokens import TOKEN_PREFIX

log = logging.getLogger(__name__)

#: Record kind of a run tree in a RedisLedger: key `{<prefix>:run:<trace id>:<random>}:tree`, value the canonical
#: JSON {"deadline"?, "limits", "run", "scopes"} written at the first export (see docs/fleet.md).
TREE_RECORD = "tree"
#: The W3C baggage entry that carries the token in `inject` / `extract`.
BAGGAGE_KEY = sc.BAGGAGE_RUN

_DIM_FIELD = {dim: field for field, (dim, _, _) in LIMITS.items()}
_INT_DIMS = tokens._INT_DIMS
_TRACE = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()


def _scope(name: str, limits: Mapping[str, float], window: float | None = None) -> Scope:
    """A Scope of numbers already checked (`tokens.limits`: known dims, finite, >= 0), built without pydantic's
    validation because a remaining limit may be 0."""
    fields: dict[str, Any] = {_DIM_FIELD[dim]: value for dim, value in limits.items() if dim in _DIM_FIELD}
    return Scope.model_construct(name=name, window_seconds=window, **fields)


def _set_scopes(node: RunNode, extra: tuple[Scope, ...]) -> None:
    node.add_scopes(extra)


def _node(run: Run | RunNode | None) -> RunNode:
    if isinstance(run, Run):
        return run.node
    node = run if run is not None else current_run()
    if node is None:
        raise RuntimeError("export_run() needs a run: call it inside `with otel_budget.run(...)` or pass the run")
    return node


def _tree_scope(node: RunNode) -> tuple[Scope, bool]:
    """The store scope of this run's tree, made on first use from what the run has left (True when made now)."""
    with node.lock:
        tree: Scope | None = getattr(node, "_tree_scope", None)
        if tree is not None:
            return tree, False
        left: dict[str, float] = {}
        for dim in lg.DIMS:
            room = lg.headroom(node.accounts, dim)
            if room != math.inf:
                left[dim] = max(0.0, math.floor(room) if dim in _INT_DIMS else room)
        ident = node.trace_id or os.urandom(16).hex()
        tree = _scope(f"{TREE_SCOPE_PREFIX}{ident}:{os.urandom(4).hex()}", left)
        node._tree_scope = tree  # type: ignore[attr-defined]
    _set_scopes(node, (tree,))
    return tree, True


def _record_tree(payload: Mapping[str, Any]) -> None:
    """With a RedisLedger, keep the tree's quota, deadline and fleet scopes in Redis: the authority a worker
    reads, whatever its token says."""
    store = config.get().ledger
    if not isinstance(store, RedisLedger):
        return
    record = {k: payload[k] for k in ("deadline", "limits", "run", "scopes") if k in payload}
    try:
        store.put_record(payload["tree"], TREE_RECORD, canonical(record).decode())
    except LedgerUnavailable as exc:
        log.warning("otel-budget: the run tree %s could not be recorded in the shared ledger (%s); workers attaching "
                    "to it are refused while the ledger fails closed", payload["tree"], exc)


def _authoritative(payload: dict[str, Any]) -> dict[str, Any]:
    """With a RedisLedger, the token's quota narrowed from the tree's record, and the record's fleet scopes."""
    store = config.get().ledger
    if not isinstance(store, RedisLedger):
        return payload
    tree = payload["tree"]
    try:
        text = store.get_record(tree, TREE_RECORD, refresh=True)
    except LedgerUnavailable as exc:
        if store.fail == "open":
            log.warning("otel-budget: %s; the run token is used as given (fail='open')", exc)
            return payload
        raise InvalidRunState(f"attach_run(): the tree {tree} cannot be checked: {exc}") from None
    if text is None:
        raise InvalidRunState(
            f"attach_run(): the run tree {tree} is not recorded in the shared ledger: the token was edited, exported "
            "without this ledger (instrument(ledger=RedisLedger(...)) in the coordinator), or the tree expired "
            "(RedisLedger(tree_ttl=...))")
    what = "the shared ledger's record of the run tree"
    try:
        record = json.loads(text)
    except ValueError:
        raise InvalidRunState(f"{what} {tree} is damaged") from None
    if not isinstance(record, dict) or not isinstance(record.get("scopes", []), list):
        raise InvalidRunState(f"{what} {tree} is damaged")
    cap = tokens.limits(record.get("limits", {}), "limits", what)
    limits = dict(cap)
    for dim, value in payload["limits"].items():  # a token can only narrow (the worker's own budget)
        limits[dim] = min(value, limits.get(dim, math.inf))
    scopes = [tokens.scope_of(s, f"scopes[{i}]", what) for i, s in enumerate(record.get("scopes", []))]
    # the tree's cap in the store is the recorded one; the fleet scopes are the ones the coordinator recorded, only
    out = {**payload, "limits": limits, "cap": cap, "scopes": scopes}
    if record.get("deadline") is not None:
        deadline = amount(record["deadline"], "deadline", what)
        out["deadline"] = min(deadline, payload.get("deadline", math.inf))
    return out


def decode(token: str, *, signed: bool = False) -> dict[str, Any]:
    """The token's content, checked: trace context (`tp`, `ts`), `run`, `tree` scope, `limits`, `deadline`,
    `scopes`. Raises `InvalidRunState` (a ValueError) naming what is wrong; see `tokens`."""
    return tokens.decode(token, signed=signed)


def export_run(run: Run | RunNode | None = None) -> str:
    """A token that lets another process attach to this run's tree (the current run when `run` is None).

    The first export moves the run's remaining budget into a shared-store scope that this run uses too from
    now on; later exports return tokens for the same scope. Export before opening nested runs that should
    share it (runs opened earlier keep drawing from the run's local budget only).
    """
    node = _node(run)
    tree, created = _tree_scope(node)
    carrier: dict[str, str] = {}
    span_ctx = None
    if node.trace_id and node.span_id:
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

        span_ctx = set_span_in_context(
            NonRecordingSpan(
                SpanContext(int(node.trace_id, 16), int(node.span_id, 16), True, TraceFlags(TraceFlags.SAMPLED))
            )
        )
    _TRACE.inject(carrier, context=span_ctx)
    left = node.time_left()
    payload: dict[str, Any] = {
        "v": 1,
        "run": node.name,
        "tree": tree.name,
        "limits": tree.limits(),
        "scopes": [
            {"name": s.name, "limits": s.limits(), "window": s.window_seconds} for s in node.scopes if s is not tree
        ],
    }
    if "traceparent" in carrier:
        payload["tp"] = carrier["traceparent"]
        if carrier.get("tracestate"):
            payload["ts"] = carrier["tracestate"]
    if left != math.inf:
        payload["deadline"] = round(time.time() + left, 3)
    if created:
        _record_tree(payload)
    return tokens.encode(payload)


def _worker_budget(payload: Mapping[str, Any], budget: Budget | None) -> Budget:
    """The worker's own budget: the remaining limits, narrowed by `budget` when given."""
    base = budget or Budget()
    update: dict[str, Any] = {}
    for dim, value in payload.get("limits", {}).items():
        field = _DIM_FIELD.get(dim)
        if field is None:
            continue
        mine = getattr(base, field)
        value = int(value) if dim in _INT_DIMS else float(value)
        update[field] = value if mine is None else min(mine, value)
    deadline = payload.get("deadline")
    if deadline is not None:
        left = max(0.001, float(deadline) - time.time())
        update["max_seconds"] = left if base.max_seconds is None else min(base.max_seconds, left)
    # every value was checked by `tokens.decode` (finite, >= 0, whole where a count); a limit left at 0 is not a
    # valid Budget field, yet it must refuse the worker's first call, hence the copy
    return base.model_copy(update=update)


class AttachedRun(Run):
    """A run in a worker that belongs to a tree exported by `export_run` (see `attach_run`)."""

    def __init__(self, token: str, name: str = "worker", budget: Budget | None = None) -> None:
        self.payload = _authoritative(decode(token))
        super().__init__(name, _worker_budget(self.payload, budget))

    @property
    def tree_scope(self) -> str:
        """The store scope shared by the whole tree."""
        return str(self.payload["tree"])

    def _prepare(self, node: RunNode) -> dict[str, Any]:
        payload = self.payload
        scopes = [_scope(payload["tree"], payload.get("cap", payload["limits"]))]
        for s in payload["scopes"]:
            scopes.append(_scope(s["name"], s["limits"], s["window"]))
        _set_scopes(node, tuple(scopes))
        if config.get().ledger is None:
            log.warning(
                "otel-budget: attach_run() without a shared ledger (instrument(ledger=RedisLedger(...))): the "
                "tree's remaining budget is enforced in this process only"
            )
        if node.parent is not None or "tp" not in payload:
            return {}
        carrier = {"traceparent": payload["tp"]}
        if payload.get("ts"):
            carrier["tracestate"] = payload["ts"]
        return {"context": _TRACE.extract(carrier)}


def attach_run(token: str, name: str = "worker", budget: Budget | None = None) -> AttachedRun:
    """Open a run (context manager or decorator) that charges the tree the token came from.

    Its span is a child of the exporting run's span (same trace id); its calls reserve in the tree's store
    scope and in the fleet scopes the exporting run used, plus its own `budget` if given.
    """
    return AttachedRun(token, name, budget)


def inject(headers: MutableMapping[str, str] | None = None, run: Run | RunNode | None = None) -> MutableMapping[str, str]:
    """Put the current trace context (`traceparent`) and the run token (W3C `baggage`) into `headers`."""
    out: MutableMapping[str, str] = {} if headers is None else headers
    token = export_run(run)
    _TRACE.inject(out)
    ctx = baggage.set_baggage(BAGGAGE_KEY, token, context=otel_context.get_current())
    _BAGGAGE.inject(out, context=ctx)
    return out


def extract(headers: Mapping[str, str]) -> str | None:
    """The run token carried by `headers` (from `inject`), or None. Only a signed token is accepted here (a
    request's headers come from anyone): without a secret, or with a token that is unsigned or edited, this
    raises `InvalidRunState`. Nothing reads baggage unless the code calls this. An incoming `traceparent` header
    wins over the one in the token (it may name a more precise parent, e.g. an HTTP client span)."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    token = baggage.get_baggage(BAGGAGE_KEY, _BAGGAGE.extract(lowered))
    if not isinstance(token, str):
        return None
    payload = decode(token, signed=True)
    if "traceparent" in lowered:
        payload["tp"] = lowered["traceparent"]
        if lowered.get("tracestate"):
            payload["ts"] = lowered["tracestate"]
        else:
            payload.pop("ts", None)
    return tokens.encode(payload)


def tree_usage(token: str) -> dict[str, float]:
    """Used plus reserved per dimension in the tree's store scope (every process's calls together)."""
    from ..core.node_state import _LOCAL_STORE

    store = config.get().ledger or _LOCAL_STORE
    return store.read(str(decode(token)["tree"]))


__all__ = ["AttachedRun", "BAGGAGE_KEY", "InvalidRunState", "TOKEN_PREFIX", "attach_run", "decode", "export_run", "extract", "inject",
           "tree_usage"]
