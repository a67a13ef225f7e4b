"""One run in the tree: its budget, its account, and the budget decisions for the calls made in it.

A nested run draws from its own account and from every ancestor's at once, so a subagent can only narrow what
its parents leave. The current node lives in a `ContextVar`, so the tree follows asyncio tasks, and threads and
pool tasks started in a run (`instrumentation/threads.py` copies the context when they start).
"""
from __future__ import annotations

from contextvars import ContextVar

from .watch import NodeWatch

_current: ContextVar[RunNode | None] = ContextVar("otel_budget_run", default=None)


def current_run() -> RunNode | None:
    """The innermost active run of this context, or None."""
    return _current.get()


class RunNode(NodeWatch):
    """One run in the tree: its budget, its account, what it saw, how it ended.

    Built in layers, each on the one below: state (node_state.py), stops and the outcome (stops.py), calls in
    flight (in_flight.py), settlement (settlement.py), admission (admission.py), progress checks and tool
    admission (watch.py)."""
