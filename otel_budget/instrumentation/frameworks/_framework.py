"""What the agent-framework adapters share: the per-call budget hook, the wrap-up text of a stop, and what a
limit pause shows through a framework's own pause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core.run import RunNode
from ...core.wrapup import template_wrap_up
from ...model.budget import Budget, StopReason
from ...model.outcome import BudgetExceeded

if TYPE_CHECKING:
    from ...model.paused import PendingCall

#: The key (or attribute) under which a framework call carries its own budget.
BUDGET_KEY = "otel_budget"


def budget_from(carrier: Any) -> Budget | None:
    """The Budget a framework call brings: `carrier["otel_budget"]` or `carrier.otel_budget`, else None.

    A mapping of Budget fields is accepted too (a context restored from JSON, e.g. an Agents SDK `RunState`)."""
    if carrier is None:
        return None
    value = carrier.get(BUDGET_KEY) if isinstance(carrier, Mapping) else getattr(carrier, BUDGET_KEY, None)
    if isinstance(value, Mapping):
        return Budget.model_validate(value)
    return value if isinstance(value, Budget) else None


def stop_text(node: RunNode | None, exc: BudgetExceeded) -> str:
    """The wrap-up of a run stopped by `exc`, as the final answer a framework hands its user."""
    if node is None:
        return f"Stopped at a limit: {exc.limit or exc.reason.value}. The task is NOT complete. {exc.message}"
    return template_wrap_up(node, node.snapshot(exc.reason, exc.limit, exc.message))


def limit_pause(node: RunNode | None, exc: BudgetExceeded) -> PendingCall | None:
    """The limit the run waits on when `exc` is a pause at a limit (`Budget(on_limit="pause")`), else None: a
    framework then pauses through its own mechanism instead of answering with the wrap-up."""
    if node is None or exc.reason is not StopReason.AWAITING_APPROVAL or node.approval is None:
        return None
    pending = node.approval.pending
    return pending if pending is not None and pending.kind == "limit" else None


def limit_value(pending: PendingCall, node: RunNode) -> dict[str, Any]:
    """What a framework's pause shows a person for a limit pause: the limit, what was used of it, its value, and
    the run's wrap-up so far."""
    return {"kind": "limit", "limit": pending.limit, "used": pending.used, "cap": pending.cap,
            "run": node.name, "detail": node.stop_state[2] if node.stop_state else ""}
