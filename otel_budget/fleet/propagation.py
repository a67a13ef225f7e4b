"""Run trees across processes: carry a run's identity and remaining budget to a worker.

In the coordinator, inside a run::

    token = otel_budget.propagation.export_run()        # a short string: send it with the task
    # or, over HTTP: headers = otel_budget.propagation.inject({})   (traceparent + baggage)

In the worker (another process or machine, with the same `instrument(ledger=RedisLedger(...))`)::

    token = otel_budget.propagation.extract(request.headers)   # or the string itself
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
"""

from __future__ import annotations

import base64
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
from ..telemetry import semconv as sc
from .redis_ledger import TREE_SCOPE_PREFIX

log = logging.getLogger(__name__)

#: Every token starts with this (format version 1).
TOKEN_PREFIX = "otb1."
#: The W3C baggage entry that carries the token in `inject` / `extract`.
BAGGAGE_KEY = sc.BAGGAGE_RUN

_DIM_FIELD = {dim: field for field, (dim, _, _) in LIMITS.items()}
_INT_DIMS = {"steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens"}
_TRACE = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()


def _scope(name: str, limits: Mapping[str, float], window: float | None = None) -> Scope:
    """A Scope built without validation (a remaining limit may be 0)."""
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


def _tree_scope(node: RunNode) -> Scope:
    """The store scope of this run's tree, made on first use from what the run has left."""
    with node.lock:
        tree: Scope | None = getattr(node, "_tree_scope", None)
        if tree is not None:
            return tree
        left: dict[str, float] = {}
        for dim in lg.DIMS:
            room = lg.headroom(node.accounts, dim)
            if room != math.inf:
                left[dim] = max(0.0, math.floor(room) if dim in _INT_DIMS else room)
        ident = node.trace_id or os.urandom(16).hex()
        tree = _scope(f"{TREE_SCOPE_PREFIX}{ident}:{os.urandom(4).hex()}", left)
        node._tree_scope = tree  # type: ignore[attr-defined]
    _set_scopes(node, (tree,))
    return tree


def _encode(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> dict[str, Any]:
    """The token's content: trace context (`tp`, `ts`), `run`, `tree` scope, `limits`, `deadline`, `scopes`."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise ValueError("not an otel-budget run token (it should start with 'otb1.')")
    body = token[len(TOKEN_PREFIX):]
    try:
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError as exc:
        raise ValueError(f"a damaged otel-budget run token: {exc}") from exc
    if not isinstance(payload, dict) or "tree" not in payload:
        raise ValueError("a damaged otel-budget run token: no tree scope")
    return payload


def export_run(run: Run | RunNode | None = None) -> str:
    """A token that lets another process attach to this run's tree (the current run when `run` is None).

    The first export moves the run's remaining budget into a shared-store scope that this run uses too from
    now on; later exports return tokens for the same scope. Export before opening nested runs that should
    share it (runs opened earlier keep drawing from the run's local budget only).
    """
    node = _node(run)
    tree = _tree_scope(node)
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
    return _encode(payload)


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
    return base.model_copy(update=update)


class AttachedRun(Run):
    """A run in a worker that belongs to a tree exported by `export_run` (see `attach_run`)."""

    def __init__(self, token: str, name: str = "worker", budget: Budget | None = None) -> None:
        self.payload = decode(token)
        super().__init__(name, _worker_budget(self.payload, budget))

    @property
    def tree_scope(self) -> str:
        """The store scope shared by the whole tree."""
        return str(self.payload["tree"])

    def _prepare(self, node: RunNode) -> dict[str, Any]:
        payload = self.payload
        scopes = [_scope(payload["tree"], payload.get("limits", {}))]
        for s in payload.get("scopes", []):
            scopes.append(_scope(s["name"], s.get("limits", {}), s.get("window")))
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
    """The run token carried by `headers` (from `inject`), or None. An incoming `traceparent` header wins over
    the one in the token (it may name a more precise parent, e.g. an HTTP client span)."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    token = baggage.get_baggage(BAGGAGE_KEY, _BAGGAGE.extract(lowered))
    if not isinstance(token, str):
        return None
    payload = decode(token)
    if "traceparent" in lowered:
        payload["tp"] = lowered["traceparent"]
        if lowered.get("tracestate"):
            payload["ts"] = lowered["tracestate"]
        else:
            payload.pop("ts", None)
    return _encode(payload)


def tree_usage(token: str) -> dict[str, float]:
    """Used plus reserved per dimension in the tree's store scope (every process's calls together)."""
    from ..core.node_state import _LOCAL_STORE

    store = config.get().ledger or _LOCAL_STORE
    return store.read(str(decode(token)["tree"]))


__all__ = ["AttachedRun", "BAGGAGE_KEY", "TOKEN_PREFIX", "attach_run", "decode", "export_run", "extract", "inject",
           "tree_usage"]
