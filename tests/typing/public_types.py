"""Checked by `mypy --strict` in `make typecheck` (not run by pytest): the public API's types are honest."""

from __future__ import annotations

import otel_budget
from otel_budget import RunOutcome


@otel_budget.run("researcher", budget=otel_budget.Budget(max_steps=10))
def research(task: str) -> str:
    return task


@otel_budget.run("async-researcher")
async def research_async(task: str) -> int:
    return len(task)


def use_sync() -> str:
    result = research("find the invoices")
    if isinstance(result, RunOutcome):  # a stopped run returns its outcome: the type says so
        return result.wrap_up
    return result.upper()


async def use_async() -> int:
    result = await research_async("count")
    return 0 if isinstance(result, RunOutcome) else result + 1


def use_with_block() -> str:
    with otel_budget.run("invoice-agent", budget=otel_budget.Budget(max_steps=25, max_usd=0.80)) as run:
        while run.allows():
            break
    outcome = run.outcome  # a RunOutcome once the block has ended: no Optional to narrow
    return f"{outcome.stop_reason.value} {outcome.limit} {outcome.wrap_up}"


def approvals_by_tool_name() -> otel_budget.Budget:
    return otel_budget.Budget(max_steps=25, approve=["git_push", "send_email"])  # the documented shorthand


def resumed_state(paused_json: str) -> object:
    state: object = None
    with otel_budget.resume(paused_json, approved=True) as resumed:  # a ResumedRun, with its saved state
        state = resumed.state
    return state
