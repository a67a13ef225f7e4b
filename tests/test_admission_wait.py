"""A call refused only because another thread's call in flight holds the room waits for it to settle, but never
past the run's deadline, and never longer than `ADMISSION_WAIT` without one: a holder that never settles (here a
stream opened and never read) must not freeze the agent's other threads.

Real openai SDK, threads, ScriptedLLM. The reservations: each request asks for 600 output tokens under a
1,000-token cap, so the second call fits only once the first has settled (it really uses a few tokens).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import otel_budget as ob
from otel_budget.core import in_flight
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]
#: Far below the 60 s a refused call used to wait; far above the time the tests need (a generous bound).
NOT_FROZEN = 45.0


def _holder(oai: Any, opened: threading.Event, release: threading.Event, read: bool) -> None:
    """Open a stream (its call is in flight from now on), then wait; read it to its end only when `read`."""
    stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, max_completion_tokens=600, stream=True)
    opened.set()
    release.wait(60)
    if read:
        for _ in stream:
            pass


def _second(oai: Any, results: list[Any]) -> None:
    try:
        oai.chat.completions.create(model="gpt-4o", messages=MSG, max_completion_tokens=600)
        results.append("sent")
    except ob.BudgetExceeded as exc:
        results.append(exc)


def _scenario(oai: Any, budget: ob.Budget, read_after: float | None) -> tuple[ob.Run, list[Any], float]:
    """A holder thread opens a stream; a second thread then calls. The holder reads its stream after `read_after`
    seconds, or never (None) before the second call is over. Returns the run, the second call's result and the
    seconds it took."""
    opened, release, results = threading.Event(), threading.Event(), []
    with ob.run("waiting", budget=budget) as run:
        holder = threading.Thread(target=_holder, args=(oai, opened, release, read_after is not None))
        holder.start()
        assert opened.wait(30)
        second = threading.Thread(target=_second, args=(oai, results))
        start = time.monotonic()
        second.start()
        if read_after is not None:
            time.sleep(read_after)
            release.set()
        second.join(NOT_FROZEN + 30)
        took = time.monotonic() - start
        release.set()
        holder.join(30)
    return run, results, took


def test_without_a_deadline_a_stuck_holder_delays_a_refused_call_by_the_default_wait_only(otel, llm, oai):
    llm.default = Turn(text="fine", output_tokens=3)
    run, results, took = _scenario(oai, ob.Budget(max_total_tokens=1_000), read_after=None)
    (result,) = results
    assert isinstance(result, ob.BudgetExceeded), result
    assert result.reason is ob.StopReason.TOKENS and "max_total_tokens" in str(result)
    assert "in flight" in str(result)  # it says why it did not fit
    assert took < NOT_FROZEN, took  # the default wait (10 s), not the 60 s it used to be
    assert in_flight.ADMISSION_WAIT <= 10
    assert len(llm.requests) == 1  # the refused call was never sent
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_with_a_deadline_a_refused_call_waits_until_it_and_stops_for_time(otel, llm, oai):
    llm.default = Turn(text="fine", output_tokens=3)
    run, results, took = _scenario(oai, ob.Budget(max_total_tokens=1_000, max_seconds=1.5), read_after=None)
    (result,) = results
    assert isinstance(result, ob.BudgetExceeded), result
    assert result.reason is ob.StopReason.TIME, result  # the time ran out while it waited: that is the stop
    assert took < NOT_FROZEN
    assert len(llm.requests) == 1
    assert run.outcome.stop_reason is ob.StopReason.TIME


def test_a_holder_that_settles_lets_the_waiting_call_through(otel, llm, oai):
    llm.default = Turn(text="fine", output_tokens=3)
    run, results, _ = _scenario(oai, ob.Budget(max_total_tokens=1_000, max_seconds=60), read_after=0.3)
    assert results == ["sent"]
    assert len(llm.requests) == 2
    assert run.outcome.stop_reason is ob.StopReason.DONE


def test_an_asyncio_task_waits_no_longer_than_the_deadline_either(otel, llm, aoai):
    llm.default = Turn(text="fine", output_tokens=3)

    async def hold(opened: asyncio.Event, release: asyncio.Event) -> None:
        stream = await aoai.chat.completions.create(model="gpt-4o", messages=MSG, max_completion_tokens=600,
                                                    stream=True)
        opened.set()
        await release.wait()
        await stream.close()

    async def main() -> tuple[ob.Run, Any]:
        opened, release = asyncio.Event(), asyncio.Event()
        async with ob.run("waiting", budget=ob.Budget(max_total_tokens=1_000, max_seconds=1.5)) as run:
            holder = asyncio.create_task(hold(opened, release))
            await opened.wait()
            try:
                await aoai.chat.completions.create(model="gpt-4o", messages=MSG, max_completion_tokens=600)
                result: Any = "sent"
            except ob.BudgetExceeded as exc:
                result = exc
            release.set()
            await holder
        return run, result

    run, result = asyncio.run(asyncio.wait_for(main(), NOT_FROZEN))
    assert isinstance(result, ob.BudgetExceeded) and result.reason is ob.StopReason.TIME, result
    assert len(llm.requests) == 1
    assert run.outcome.stop_reason is ob.StopReason.TIME
