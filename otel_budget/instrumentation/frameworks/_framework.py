"""What the agent-framework adapters share: the per-call budget hook and the wrap-up text of a stop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.run import RunNode
from ...core.wrapup import template_wrap_up
from ...model.budget import Budget
from ...model.outcome import BudgetExceeded

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
