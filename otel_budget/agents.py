"""The OpenAI Agents SDK's own way to give a run its budget: run hooks.

    from otel_budget.agents import BudgetHooks, outcome
    result = await Runner.run(agent, "task", hooks=BudgetHooks(otel_budget.Budget(max_usd=0.50)))
    outcome(result).stop_reason

`context={"otel_budget": Budget(...)}` (or a typed context with an `otel_budget` attribute) keeps working and
wins when both are given. Importing this module needs `openai-agents`.
"""

from __future__ import annotations

from typing import Any

from agents import RunHooks

from .instrumentation.frameworks.openai_agents import load_state, outcome
from .model.budget import Budget


class BudgetHooks(RunHooks[Any]):
    """Run hooks that carry the run's budget: `Runner.run(agent, input, hooks=BudgetHooks(Budget(...)))`.

    Subclass it to add callbacks of your own; the budget itself is enforced by `otel_budget.instrument()`."""

    def __init__(self, budget: Budget) -> None:
        if not isinstance(budget, Budget):
            raise TypeError(f"BudgetHooks takes an otel_budget.Budget, not {type(budget).__name__}: "
                            "BudgetHooks(otel_budget.Budget(max_steps=20))")
        self.budget = budget


__all__ = ["BudgetHooks", "load_state", "outcome"]
