"""Concurrent calls never break a cap; nested runs share one budget; the tree follows threads and tasks."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from _support import ask

import otel_budget as ob
from otel_budget.testing import Turn


def test_threads_never_break_a_step_or_money_cap(otel, llm, oai):
    llm.default = Turn(text="x", output_tokens=50, delay=0.01)
    refused = []

    def worker() -> None:
        for _ in range(10):
            try:
                ask(oai, "some context " * 50, max_tokens=50)
            except ob.BudgetExceeded as exc:
                refused.append(exc.reason)
                return

    with ob.run("parallel", budget=ob.Budget(max_steps=17, max_usd=1.0)) as run:
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(worker,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(llm.requests) == 17
    assert run.outcome.usage.model_calls == 17
    assert refused and set(refused) == {ob.StopReason.STEPS}
    assert run.outcome.stop_reason is ob.StopReason.STEPS  # recorded by the refusals, closed gracefully


def test_asyncio_tasks_never_break_a_token_cap(otel, llm, aoai):
    llm.default = Turn(text="x", output_tokens=100, delay=0.02)

    async def one() -> None:
        await aoai.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "y" * 400}], max_tokens=100
        )

    async def main() -> ob.Run:
        async with ob.run("async", budget=ob.Budget(max_output_tokens=1000)) as run:
            results = await asyncio.gather(*(one() for _ in range(30)), return_exceptions=True)
        refused = [r for r in results if isinstance(r, ob.BudgetExceeded)]
        assert len(refused) == 20
        return run

    run = asyncio.run(main())
    assert run.outcome.usage.output_tokens <= 1000
    assert len(llm.requests) == 10
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_nested_runs_draw_from_the_parent_and_the_parent_goes_on(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("parent", budget=ob.Budget(max_steps=5)) as parent:
        ask(oai)
        with ob.run("child", budget=ob.Budget(max_steps=10)) as child:
            for _ in range(10):
                ask(oai)  # the child's own cap is 10, but the parent leaves only 4
        assert child.outcome.stop_reason is ob.StopReason.STEPS
        assert child.outcome.usage.model_calls == 4
        assert parent.allows() is False
    assert parent.outcome.stop_reason is ob.StopReason.STEPS
    assert parent.outcome.usage.model_calls == 5
    child_span = otel.run_span("child")
    parent_span = otel.run_span("parent")
    assert child_span.parent.span_id == parent_span.context.span_id
    assert child_span.context.trace_id == parent_span.context.trace_id


def test_child_stopped_by_its_own_cap_returns_its_outcome_to_the_parent(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("parent", budget=ob.Budget(max_steps=10)) as parent:
        with ob.run("child", budget=ob.Budget(max_steps=2)) as child:
            for _ in range(5):
                ask(oai)
        ask(oai)  # the parent still has room and goes on
    assert child.outcome.stop_reason is ob.StopReason.STEPS
    assert "max_steps" in child.outcome.wrap_up
    assert parent.outcome.stop_reason is ob.StopReason.DONE
    assert parent.outcome.usage.model_calls == 3


def test_run_tree_follows_asyncio_tasks(otel, llm, aoai):
    llm.default = Turn(text="x")

    async def sub(name: str) -> ob.RunOutcome:
        async with ob.run(name) as r:
            await aoai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
            await aoai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
        return r.outcome

    async def main() -> ob.Run:
        async with ob.run("coordinator", budget=ob.Budget(max_steps=5)) as run:
            await asyncio.gather(sub("a"), sub("b"), sub("c"))
        return run

    run = asyncio.run(main())
    assert run.outcome.usage.model_calls == 5
    assert len(llm.requests) == 5


def test_allows_sees_a_shared_scope_that_other_runs_used_up(otel, llm, oai):
    llm.default = Turn(text="x")
    shared = ob.Scope(name="allows-shared-steps", max_steps=3)
    with ob.run("first", budget=ob.Budget(scope=shared)) as first:
        while first.allows():
            ask(oai)
    assert first.outcome.stop_reason is ob.StopReason.STEPS
    with ob.run("second", budget=ob.Budget(scope=shared)) as second:
        assert second.allows() is False
    assert second.outcome.stop_reason is ob.StopReason.STEPS
    assert "shared budget 'allows-shared-steps'" in second.outcome.detail
    assert len(llm.requests) == 3
