"""Checked by `mypy --strict` in `make typecheck` (not run by pytest): the Agents SDK idioms need no ignores."""

from __future__ import annotations

from agents import Agent, Runner

import otel_budget
from otel_budget.agents import BudgetHooks, outcome


async def with_hooks(agent: Agent[None]) -> str | None:
    result = await Runner.run(agent, "task", hooks=BudgetHooks(otel_budget.Budget(max_steps=10)))
    done = outcome(result)
    return done.wrap_up if done is not None else None


async def with_context(agent: Agent[dict[str, otel_budget.Budget]]) -> bool:
    result = await Runner.run(agent, "task", context={"otel_budget": otel_budget.Budget(max_usd=0.5)})
    done = outcome(result)
    return done is not None and done.completed
