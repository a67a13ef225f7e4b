"""pydantic-ai: the budget as a capability, given the way pydantic-ai takes per-run settings.

    from pydantic_ai import Agent
    from otel_budget.pydantic_ai import BudgetLimits, outcome

    agent = Agent(model, name="researcher")
    result = await agent.run("...", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=20, max_usd=0.50))])
    result.output            # on a stop: the wrap-up (for a text output)
    outcome(result)          # the RunOutcome: stop_reason, limit, usage, wrap_up

`Agent(model, capabilities=[BudgetLimits(...)])` makes it the agent's budget for every run. With a structured
output type (no text allowed) a stop raises `otel_budget.BudgetExceeded` from `agent.run()`, after the run
closed; its `.outcome` is the final RunOutcome. See `otel_budget.instrumentation.frameworks.pydantic_ai` for the details.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability

from .instrumentation.frameworks.pydantic_ai import outcome
from .model.budget import Budget

__all__ = ["BudgetLimits", "outcome"]


@dataclass(init=False)
class BudgetLimits(AbstractCapability[Any]):
    """The run's budget as a pydantic-ai capability, per run (`agent.run(..., capabilities=[...])`) or per agent."""

    budget: Budget
    """The budget of each run that carries this capability (a nested agent run draws from its parents too)."""

    def __init__(self, budget: Budget) -> None:
        if not isinstance(budget, Budget):
            raise TypeError(f"BudgetLimits(budget) takes an otel_budget.Budget, not {type(budget).__name__}")
        self.budget = budget

    @property
    def otel_budget(self) -> Budget:
        """The budget under the key the framework adapters read (`budget` by another name)."""
        return self.budget


