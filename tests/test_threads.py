"""A run follows the work it starts in threads: pools, `run_in_executor`, `threading.Thread` and runs opened there
draw from the run and join its trace; work that outlives the run is refused, never charged to the closed run."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import Turn


def _try(oai) -> str:
    """One chat call; "sent" or the stop reason of its refusal."""
    try:
        ask(oai)
        return "sent"
    except ob.BudgetExceeded as exc:
        return exc.reason.value


def _assert_in_run_trace(otel, run_name: str, n: int) -> None:
    run_span = otel.run_span(run_name)
    chats = otel.chat_spans()
    assert len(chats) == n
    assert {s.context.trace_id for s in chats} == {run_span.context.trace_id}
    assert {s.parent.span_id for s in chats} == {run_span.context.span_id}


def test_pool_submit_and_map_draw_from_the_run_and_join_its_trace(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("pooled", budget=ob.Budget(max_steps=5)) as run, ThreadPoolExecutor(4) as pool:
        submitted = [pool.submit(_try, oai) for _ in range(6)]
        mapped = list(pool.map(lambda _: _try(oai), range(6)))
        results = [f.result() for f in submitted] + mapped
    assert len(llm.requests) == 5
    assert results.count("sent") == 5 and results.count("steps") == 7
    assert run.outcome.usage.model_calls == 5
    assert run.outcome.stop_reason is ob.StopReason.STEPS
    _assert_in_run_trace(otel, "pooled", 5)


def test_threads_and_a_thread_subclass_draw_from_the_run(otel, llm, oai):
    llm.default = Turn(text="x")
    results: list[str] = []

    class Worker(threading.Thread):
        def run(self) -> None:  # a subclass's own run() is carried too
            results.append(_try(oai))

    with ob.run("threaded", budget=ob.Budget(max_steps=3)) as run:
        threads = [threading.Thread(target=lambda: results.append(_try(oai))) for _ in range(3)]
        threads += [Worker() for _ in range(2)]
        threads.append(threading.Timer(0.0, lambda: results.append(_try(oai))))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(llm.requests) == 3
    assert sorted(results) == ["sent"] * 3 + ["steps"] * 3
    assert run.outcome.usage.model_calls == 3
    assert all("run" not in vars(t) for t in threads)  # nothing of ours is left on the thread objects
    _assert_in_run_trace(otel, "threaded", 3)


def test_run_in_executor_and_to_thread_draw_from_the_run(otel, llm, oai):
    llm.default = Turn(text="x")

    async def main() -> tuple[ob.Run, list[str]]:
        async with ob.run("executor", budget=ob.Budget(max_steps=4)) as run:
            loop = asyncio.get_running_loop()
            results = await asyncio.gather(
                *(loop.run_in_executor(None, _try, oai) for _ in range(3)),
                *(asyncio.to_thread(_try, oai) for _ in range(3)),
            )
        return run, list(results)

    run, results = asyncio.run(main())
    assert len(llm.requests) == 4
    assert results.count("sent") == 4 and results.count("steps") == 2
    assert run.outcome.usage.model_calls == 4
    _assert_in_run_trace(otel, "executor", 4)


def test_runs_opened_in_threads_are_children_of_the_run(otel, llm, oai):
    llm.default = Turn(text="x")
    outcomes: dict[str, ob.RunOutcome] = {}

    def sub(name: str) -> None:
        with ob.run(name, budget=ob.Budget(max_steps=10)) as child:
            for _ in range(3):
                ask(oai)
        outcomes[name] = child.outcome

    with ob.run("coordinator", budget=ob.Budget(max_steps=5)) as parent, ThreadPoolExecutor(3) as pool:
        list(pool.map(sub, ["sub-a", "sub-b", "sub-c"]))
    assert len(llm.requests) == 5
    assert parent.outcome.usage.model_calls == 5
    assert sum(o.usage.model_calls for o in outcomes.values()) == 5
    assert parent.outcome.stop_reason is ob.StopReason.STEPS  # its own cap refused the children's calls
    parent_span = otel.run_span("coordinator")
    for name in ("sub-a", "sub-b", "sub-c"):
        child_span = otel.run_span(name)
        assert child_span.parent.span_id == parent_span.context.span_id
        assert child_span.context.trace_id == parent_span.context.trace_id
    assert {s.context.trace_id for s in otel.chat_spans()} == {parent_span.context.trace_id}


def test_fifty_threads_at_once_never_break_the_step_cap(otel, llm, oai):
    llm.default = Turn(text="x", delay=0.005)
    results: list[str] = []
    go = threading.Barrier(50)

    def worker() -> None:
        go.wait()
        results.extend(_try(oai) for _ in range(2))

    with ob.run("storm", budget=ob.Budget(max_steps=20)) as run:
        threads = [threading.Thread(target=worker) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(llm.requests) == 20
    assert results.count("sent") == 20 and results.count("steps") == 80
    assert run.outcome.usage.model_calls == 20


def test_a_pool_created_before_the_run_carries_it_only_for_work_submitted_inside(otel, llm, oai):
    llm.default = Turn(text="x")
    with ThreadPoolExecutor(2) as pool:
        with ob.run("inside", budget=ob.Budget(max_steps=2)) as run:
            inside = [pool.submit(_try, oai).result() for _ in range(3)]
        # the pool's workers were started inside the run, yet later work does not belong to it
        seen = pool.submit(ob.current_run).result()
        after = pool.submit(_try, oai).result()
    assert inside == ["sent", "sent", "steps"]
    assert seen is None
    assert after == "sent"
    assert len(llm.requests) == 3
    assert run.outcome.usage.model_calls == 2
    outside = [s for s in otel.chat_spans() if s.context.trace_id != otel.run_span("inside").context.trace_id]
    assert len(outside) == 1


def test_a_thread_that_outlives_the_run_is_refused_and_the_closed_run_is_not_charged(otel, llm, oai):
    llm.default = Turn(text="x")
    first_done, proceed = threading.Event(), threading.Event()
    late: list[BaseException] = []

    def lingering() -> None:
        ask(oai)
        first_done.set()
        proceed.wait(10)
        try:
            ask(oai)
        except ob.BudgetExceeded as exc:
            late.append(exc)

    with ob.run("short", budget=ob.Budget(max_steps=10)) as run:
        thread = threading.Thread(target=lingering)
        thread.start()
        assert first_done.wait(10)
    assert run.outcome.usage.model_calls == 1
    usage_at_close = run.outcome.usage.model_dump()
    proceed.set()
    thread.join()
    assert len(llm.requests) == 1
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert run.outcome.usage.model_dump() == usage_at_close
    assert run.node.account.used["steps"] == 1  # nothing was charged to the closed run
    (exc,) = late
    assert exc.reason is ob.StopReason.CANCELLED
    assert "'short' it belongs to has already ended" in str(exc)


def test_a_run_opened_in_a_thread_after_its_parent_ended_is_refused(otel, llm, oai):
    llm.default = Turn(text="x")
    proceed = threading.Event()
    child: list[ob.Run] = []

    def lingering() -> None:
        proceed.wait(10)
        with ob.run("orphan") as r:
            ask(oai)
        child.append(r)

    with ob.run("parent", budget=ob.Budget(max_steps=10)) as parent:
        thread = threading.Thread(target=lingering)
        thread.start()
    proceed.set()
    thread.join()
    assert llm.requests == []
    assert parent.outcome.stop_reason is ob.StopReason.DONE
    (orphan,) = child
    assert orphan.outcome.stop_reason is ob.StopReason.CANCELLED
    assert otel.run_span("orphan").context.trace_id == otel.run_span("parent").context.trace_id


def test_outside_a_run_threads_keep_their_own_context(otel):
    var: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="unset")
    var.set("caller")
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(var.get()))
    thread.start()
    thread.join()
    with ThreadPoolExecutor(1) as pool:
        seen.append(pool.submit(var.get).result())
    assert seen == ["unset", "unset"]  # as without otel-budget: nothing is copied when no run is current


def test_charging_a_closed_run_is_refused_like_work_that_outlived_it(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("charged", budget=ob.Budget(max_usd=1.0)) as run:
        ask(oai)
        run.charge(usd=0.25, name="browser")
    used = run.node.account.used["usd"]
    outcome = run.outcome.model_dump()
    late: list[BaseException] = []

    def lingering() -> None:
        try:
            run.charge(usd=0.5, name="browser")
        except ob.BudgetExceeded as exc:
            late.append(exc)

    with pytest.raises(ob.BudgetExceeded) as caught:
        run.charge(usd=0.5, name="browser")
    thread = threading.Thread(target=lingering)
    thread.start()
    thread.join()
    for exc in (caught.value, *late):
        assert exc.reason is ob.StopReason.CANCELLED
        assert "'charged' it belongs to has already ended" in str(exc)
        assert "run.charge(usd=0.5, name='browser')" in str(exc)
    assert len(late) == 1
    assert run.node.account.used["usd"] == used  # nothing was added to the closed run
    assert run.node.charges == {"browser": 0.25}
    assert run.outcome.model_dump() == outcome
