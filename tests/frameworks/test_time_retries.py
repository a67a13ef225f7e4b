"""`max_seconds` bounds LiteLLM's own retries (`num_retries`) and google-genai's (`HttpRetryOptions`), as it bounds
the openai and anthropic SDKs' (tests/test_time_in_flight.py): a retry is made only if it can start before the
deadline, and it gets the time left after its wait.

Real LiteLLM (over the openai SDK) and google-genai against ScriptedLLM answering 500s and 429s. What is counted
is what reached the server: how many requests, and when each arrived (none after the deadline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("litellm")
genai = pytest.importorskip("google.genai")

from google.genai import types  # noqa: E402
from litellm import acompletion, completion  # noqa: E402

import otel_budget as ob  # noqa: E402
from otel_budget.testing import ScriptedLLM, Turn  # noqa: E402

MSG = [{"role": "user", "content": "hi"}]
#: What a run may take past its deadline: scheduling noise of a loaded 2-core machine (a bound, not a benchmark).
SLACK = 0.5


def _timed(is_async: bool, budget: ob.Budget, body: Callable[[], Any]) -> tuple[ob.Run, float, float]:
    """Run `body` (a coroutine function when is_async) in a run: the run, the seconds it took, its deadline."""
    start = time.monotonic()
    if is_async:

        async def main() -> ob.Run:
            async with ob.run("retrying", budget=budget) as run:
                await body()
            return run

        run = asyncio.run(main())
    else:
        with ob.run("retrying", budget=budget) as run:
            body()
    assert budget.max_seconds is not None
    return run, time.monotonic() - start, start + budget.max_seconds


def _assert_time_stop(run: ob.Run, elapsed: float, deadline: float, llm: ScriptedLLM, budget: ob.Budget) -> None:
    assert budget.max_seconds is not None
    assert elapsed <= budget.max_seconds + SLACK, f"took {elapsed:.2f} s for max_seconds={budget.max_seconds}"
    outcome = run.outcome
    assert (outcome.stop_reason, outcome.limit) == ("time", "max_seconds"), outcome
    assert llm.requests, "nothing was sent"
    # A retry that may start just before the deadline reaches the server a moment later on a loaded machine; one
    # made past the deadline (what the old code did) arrives seconds after it.
    late = [r.received - deadline for r in llm.requests if r.received >= deadline + SLACK]
    assert not late, f"a retry was sent after the deadline: {late}"
    assert all(abs(v) < 1e-9 for v in run.node.account.reserved.values()), run.node.account.reserved


# --- LiteLLM ------------------------------------------------------------------------------------------------


def _litellm(llm: ScriptedLLM, is_async: bool, retries: int) -> Any:
    kwargs = {"model": "openai/gpt-4o", "messages": MSG, "api_base": llm.openai_base_url, "api_key": "x",
              "num_retries": retries}
    if is_async:
        return lambda: acompletion(**kwargs)
    return lambda: completion(**kwargs)


def _warm_up(llm: ScriptedLLM) -> None:
    """LiteLLM's first call sets itself up (seconds on a loaded machine): do it outside the timed run."""
    llm.script(Turn(text="ready"))
    completion(model="openai/gpt-4o", messages=MSG, api_base=llm.openai_base_url, api_key="x", num_retries=0)
    llm.reset()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("status", [500, 429])
def test_litellm_num_retries_stop_at_the_deadline(scripted_llm, otel, is_async, status):
    _warm_up(scripted_llm)
    scripted_llm.default = Turn(status=status, delay=0.2)
    budget = ob.Budget(max_seconds=1.2)
    run, elapsed, deadline = _timed(is_async, budget, _litellm(scripted_llm, is_async, retries=12))
    _assert_time_stop(run, elapsed, deadline, scripted_llm, budget)
    assert 2 <= len(scripted_llm.requests) < 12  # it did retry, and stopped long before its 12 retries


def test_litellm_retries_without_a_deadline_problem_still_happen(scripted_llm, otel):
    _warm_up(scripted_llm)
    scripted_llm.script(Turn(status=500), Turn(text="ok"))
    with ob.run("retrying", budget=ob.Budget(max_seconds=60)) as run:
        reply = _litellm(scripted_llm, False, retries=2)()
    assert reply.choices[0].message.content == "ok"
    assert len(scripted_llm.requests) == 2
    assert run.outcome.stop_reason == "done"


# --- google-genai -------------------------------------------------------------------------------------------


def _retry(initial: float, attempts: int = 6) -> types.HttpRetryOptions:
    return types.HttpRetryOptions(attempts=attempts, initial_delay=initial, exp_base=2, jitter=0,
                                  http_status_codes=[429, 500, 503])


def _gemini(llm: ScriptedLLM, is_async: bool, retry: types.HttpRetryOptions, per_request: bool) -> Any:
    """A generate_content call retried by the client's retry options, or by the request's own."""
    options = types.HttpOptions(base_url=llm.base_url, retry_options=None if per_request else retry)
    client = genai.Client(api_key="x", http_options=options)
    config = types.GenerateContentConfig(http_options=types.HttpOptions(retry_options=retry)) if per_request else None
    if is_async:
        return lambda: client.aio.models.generate_content(model="gemini-2.5-flash", contents="hi", config=config)
    return lambda: client.models.generate_content(model="gemini-2.5-flash", contents="hi", config=config)


GEMINI = pytest.mark.parametrize(
    "is_async,per_request", [(False, False), (True, False), (False, True), (True, True)],
    ids=["client", "client-async", "request", "request-async"],
)


@GEMINI
@pytest.mark.parametrize("status", [500, 429])
def test_gemini_retry_options_stop_when_the_next_retry_would_start_after_the_deadline(
        scripted_llm, otel, is_async, per_request, status):
    scripted_llm.default = Turn(status=status)
    budget = ob.Budget(max_seconds=2)
    # waits 0.4, 0.8, 1.6, 3.2, 6.4 s: 12.4 s unbounded; the third retry would start at 2.8 s, after the deadline
    call = _gemini(scripted_llm, is_async, _retry(0.4), per_request)
    run, elapsed, deadline = _timed(is_async, budget, call)
    _assert_time_stop(run, elapsed, deadline, scripted_llm, budget)
    assert len(scripted_llm.requests) == 3


@GEMINI
def test_a_gemini_retry_gets_only_the_time_left_after_its_wait(scripted_llm, otel, is_async, per_request):
    # The retry starts after 1 s with about 1 s left; the server would answer it after 3 s.
    scripted_llm.script(Turn(status=503), Turn(text="too late", delay=3.0))
    budget = ob.Budget(max_seconds=2)
    run, elapsed, deadline = _timed(is_async, budget, _gemini(scripted_llm, is_async, _retry(1.0), per_request))
    _assert_time_stop(run, elapsed, deadline, scripted_llm, budget)
    assert len(scripted_llm.requests) == 2


def test_gemini_retries_are_left_to_the_sdk_without_a_time_limit(scripted_llm, otel):
    scripted_llm.script(Turn(status=500), Turn(status=429), Turn(text="ok"))
    with ob.run("untimed", budget=ob.Budget(max_steps=5)) as run:
        reply = _gemini(scripted_llm, False, _retry(0.05), per_request=False)()
    assert reply.text == "ok"
    assert len(scripted_llm.requests) == 3
    assert run.outcome.stop_reason == "done"
