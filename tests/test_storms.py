"""Concurrent storms: a money cap is exceeded by at most one call's input-estimate error; `strict` never exceeds it.

The scripted server reports 1.5 times as many prompt tokens as the library's first estimate (`chars / 4 * 1.05 +
8`), so every call admitted on an estimate costs more than it reserved. Spend is computed from the usage the
server reported for the requests it received, not from the library's counters.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import otel_budget as ob
from otel_budget.core import config
from otel_budget.testing import RecordedRequest, ScriptedLLM, Turn

MODEL = "gpt-4o"
PROMPT = "lorem ipsum dolor sit amet " * 70  # about 1,900 characters: about 520 tokens estimated, 780 real
OUTPUT = 40
CAP = 0.10
STORM = 50


def first_estimate(body: dict) -> int:
    """The library's input estimate before any call calibrated it."""
    return int(len(json.dumps(body)) / 4 * 1.05) + 8


class Meter:
    """Scripts 1.5x-the-estimate prompt tokens and adds up what the server reported, priced as the library does."""

    def __init__(self, llm: ScriptedLLM, delay: float = 0.05) -> None:
        self.reported: list[tuple[int, int]] = []  # (prompt tokens reported, first estimate) per request
        self.lock = threading.Lock()
        self.delay = delay
        llm.responder = self.respond

    def respond(self, request: RecordedRequest) -> Turn:
        estimate = first_estimate(request.body)
        real = int(estimate * 1.5)
        with self.lock:
            self.reported.append((real, estimate))
        return Turn(text="ok", input_tokens=real, output_tokens=OUTPUT, delay=self.delay)

    @property
    def spent(self) -> float:
        price = config.get().prices.lookup("openai", MODEL)
        assert price is not None
        return sum(price.cost(real, OUTPUT) for real, _ in self.reported)

    @property
    def one_estimate_error(self) -> float:
        """The largest input-estimate error of one call, in dollars (the first, uncalibrated estimate)."""
        price = config.get().prices.lookup("openai", MODEL)
        assert price is not None
        return max(price.cost(real - estimate, 0) for real, estimate in self.reported)


def thread_storm(oai, budget: ob.Budget) -> tuple[ob.Run, list[BaseException]]:
    barrier = threading.Barrier(STORM)
    refused: list[BaseException] = []

    def call() -> None:
        barrier.wait()
        try:
            oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                        max_completion_tokens=OUTPUT)
        except ob.BudgetExceeded as exc:
            refused.append(exc)

    with ob.run("storm", budget=budget) as run, ThreadPoolExecutor(STORM) as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for _ in range(STORM)]
        for f in futures:
            f.result()
    return run, refused


def asyncio_storm(aoai, budget: ob.Budget) -> tuple[ob.Run, list[BaseException]]:
    async def call() -> None:
        await aoai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                           max_completion_tokens=OUTPUT)

    async def main() -> tuple[ob.Run, list[BaseException]]:
        async with ob.run("storm", budget=budget) as run:
            results = await asyncio.gather(*(call() for _ in range(STORM)), return_exceptions=True)
        refused = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, ob.BudgetExceeded) for r in refused), refused
        return run, refused

    return asyncio.run(main())


def test_the_storm_would_overshoot_if_admitted_on_the_estimate(otel, llm, oai):
    """The premise: the estimates of all 50 calls fit the cap, what they really cost does not."""
    meter = Meter(llm, delay=0)
    with ob.run("one", budget=ob.Budget(max_usd=CAP)):
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                    max_completion_tokens=OUTPUT)
    price = config.get().prices.lookup("openai", MODEL)
    real, estimate = meter.reported[0]
    assert STORM * price.cost(estimate, OUTPUT) < CAP < STORM * price.cost(real, OUTPUT)


@pytest.mark.parametrize("storm", [thread_storm, asyncio_storm], ids=["threads", "asyncio"])
def test_a_storm_exceeds_a_money_cap_by_at_most_one_calls_input_estimate_error(otel, llm, oai, aoai, storm):
    meter = Meter(llm)
    run, refused = storm(oai if storm is thread_storm else aoai, ob.Budget(max_usd=CAP))
    assert meter.spent <= CAP + meter.one_estimate_error
    assert refused and len(llm.requests) + len(refused) == STORM  # refused calls never reached the server
    assert len(llm.requests) >= 10  # the cap was used, not refused wholesale
    assert run.outcome.usage.cost_usd == pytest.approx(meter.spent)
    assert run.outcome.stop_reason is ob.StopReason.COST


@pytest.mark.parametrize("storm", [thread_storm, asyncio_storm], ids=["threads", "asyncio"])
def test_strict_never_exceeds_a_money_cap_in_a_storm(otel, llm, oai, aoai, storm):
    meter = Meter(llm)
    run, refused = storm(oai if storm is thread_storm else aoai, ob.Budget(max_usd=CAP, strict=True))
    assert refused and len(llm.requests) + len(refused) == STORM
    assert len(llm.requests) >= 10
    assert meter.spent <= CAP
    assert run.outcome.usage.cost_usd == pytest.approx(meter.spent)


def test_strict_never_exceeds_a_token_cap_in_a_loop(otel, llm, oai):
    meter = Meter(llm, delay=0)
    cap = 5_000
    with ob.run("loop", budget=ob.Budget(max_input_tokens=cap, strict=True)) as run:
        history = [{"role": "user", "content": PROMPT}]
        while True:
            oai.chat.completions.create(model=MODEL, messages=history, max_completion_tokens=OUTPUT)
            history.append({"role": "user", "content": "and more " * 30})
    assert sum(real for real, _ in meter.reported) <= cap
    assert run.outcome.usage.input_tokens <= cap
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_strict_reserves_one_input_token_per_byte_of_the_request(otel, llm, oai):
    """A request of about 1,950 bytes (about 780 real tokens, 520 estimated) under a 1,500-token cap."""
    Meter(llm, delay=0)
    messages = [{"role": "user", "content": PROMPT}]
    with ob.run("loose", budget=ob.Budget(max_input_tokens=1_500)) as loose:
        oai.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=OUTPUT)
    assert len(llm.requests) == 1 and loose.outcome.completed
    with ob.run("strict", budget=ob.Budget(max_input_tokens=1_500, strict=True)) as strict:
        oai.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=OUTPUT)
    assert len(llm.requests) == 1  # refused before sending: its worst case does not fit
    assert strict.outcome.stop_reason is ob.StopReason.TOKENS and strict.outcome.limit == "max_input_tokens"


def test_sequential_calls_keep_reserving_at_the_estimate(otel, llm, oai):
    """Only calls made while another is in flight reserve the worst case: a plain loop uses the cap as before."""
    Meter(llm, delay=0)
    with ob.run("loop", budget=ob.Budget(max_input_tokens=2_000)) as run:
        for _ in range(3):
            oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                        max_completion_tokens=OUTPUT)
    # 780 used + about 830 estimated (calibrated by the first call) fits 2,000; the worst case (1,960) would not.
    assert len(llm.requests) == 2
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


@pytest.mark.parametrize("storm", [thread_storm, asyncio_storm], ids=["threads", "asyncio"])
def test_a_storm_that_fits_is_sent_whole(otel, llm, oai, aoai, storm):
    """Worst cases that do not all fit at once are not refused: a call waits for calls in flight to settle."""
    meter = Meter(llm)
    price = config.get().prices.lookup("openai", MODEL)
    cap = 0.25  # the 50 calls cost about $0.12; their worst cases (one token per byte) about $0.27
    run, refused = storm(oai if storm is thread_storm else aoai, ob.Budget(max_usd=cap, strict=True))
    assert refused == [] and len(llm.requests) == STORM
    assert STORM * price.cost(len(json.dumps(llm.requests[0].body)), OUTPUT) > cap  # the worst cases did not fit
    assert meter.spent <= cap
    assert run.outcome.completed


def test_strict_bounds_a_growing_history_by_the_last_reported_count(otel, llm, oai):
    """The second request repeats the first and adds one message: its bound is the first one's reported count
    plus the new message's bytes (about 1,090 tokens), not the whole body's bytes (about 2,260)."""
    meter = Meter(llm, delay=0)
    cap = 2_000
    history = [{"role": "user", "content": PROMPT}]
    with ob.run("history", budget=ob.Budget(max_input_tokens=cap, strict=True)) as run:
        for _ in range(3):
            oai.chat.completions.create(model=MODEL, messages=history, max_completion_tokens=OUTPUT)
            history.append({"role": "user", "content": "and more " * 30})
    assert len(llm.requests) == 2  # the third one's bound (about 1,210 on top of 1,680 used) does not fit
    assert sum(real for real, _ in meter.reported) <= cap
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_the_estimate_slot_is_given_back_by_every_call_over_a_thousand_concurrent_calls(otel, llm, oai):
    """1,000 calls from 8 threads under a token cap, the last ones refused by max_steps after they took the slot:
    each call that took the estimate slot gives it back, settled or refused (never given back, every later call of
    the run would reserve its bound)."""
    Meter(llm, delay=0)
    calls, steps = 1_000, 900

    def call() -> bool:
        try:
            oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                        max_completion_tokens=OUTPUT)
        except ob.BudgetExceeded:
            return False
        return True

    with ob.run("many", budget=ob.Budget(max_steps=steps, max_input_tokens=10**9)) as run:
        with ThreadPoolExecutor(8) as pool:
            sent = [f.result() for f in [pool.submit(contextvars.copy_context().run, call) for _ in range(calls)]]
        assert run.node.root.estimate_slot == [True]  # given back once, by the one call that held it
    assert sent.count(True) == len(llm.requests) == steps
    assert run.outcome.stop_reason is ob.StopReason.STEPS
