"""One scope, one cap: deployments that define a shared scope differently get the tightest definition."""

from __future__ import annotations

import logging
import time

import openai
import pytest

import otel_budget
from otel_budget import Budget, RedisLedger, Scope, StopReason
from otel_budget.core.ledger import MemoryLedger, Refusal, Reservation
from otel_budget.testing import ScriptedLLM, Turn


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def agent(client: openai.OpenAI, scope: Scope, calls: int) -> otel_budget.RunOutcome:
    with otel_budget.run("agent", budget=Budget(scope=scope)) as run:
        for _ in range(calls):
            ask(client)
    assert run.outcome is not None
    return run.outcome


def conflict_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "defin" in r.getMessage()]


@pytest.mark.parametrize("kind", ["redis", "memory"])
def test_two_deployments_with_different_caps_share_the_tightest(
    kind: str, ledger: RedisLedger, prefix: str, instrumented, llm: ScriptedLLM, oai: openai.OpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    instrumented(ledger if kind == "redis" else None)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    name = f"{prefix}-invoices"  # the in-process store lives as long as the test session
    tight, loose = Scope(name=name, max_steps=10), Scope(name=name, max_steps=20)
    caplog.set_level(logging.WARNING)
    assert agent(oai, tight, 4).completed
    second = agent(oai, loose, 10)  # the second deployment believes the scope holds 20 steps
    assert second.stop_reason is StopReason.STEPS and second.usage.model_calls == 6
    third = agent(oai, loose, 5)
    assert third.stop_reason is StopReason.STEPS and third.usage.model_calls == 0
    assert len(llm.requests) == 10
    warnings = conflict_warnings(caplog)
    assert len(warnings) == 1  # once per scope and definition, not per call
    assert name in warnings[0] and "steps=10" in warnings[0] and "steps=20" in warnings[0]
    if kind == "redis":
        detail = ledger.detail(name)
        assert detail["used"]["steps"] == 10 and detail["limits"] == {"steps": 10.0}
        assert detail["conflict"] is True
        assert detail["definitions"] == [{"steps": 10.0}, {"steps": 20.0}]


def test_detail_shows_one_definition_and_no_conflict_when_all_agree(ledger: RedisLedger) -> None:
    assert ledger.detail("fleet")["limits"] == {} and ledger.detail("fleet")["definitions"] == []
    for _ in range(2):
        assert isinstance(ledger.reserve("fleet", {"usd": 0.1}, {"usd": 1.0, "steps": 5.0}), Reservation)
    detail = ledger.detail("fleet")
    assert detail["limits"] == {"steps": 5.0, "usd": 1.0} and detail["conflict"] is False
    assert detail["definitions"] == [{"steps": 5.0, "usd": 1.0}]


def test_a_shorter_window_elsewhere_does_not_start_the_counters_anew(ledger: RedisLedger) -> None:
    for _ in range(2):
        held = ledger.reserve("daily", {"steps": 1.0}, {"steps": 2.0}, window=86400)
        assert isinstance(held, Reservation)
        ledger.settle(held, {"steps": 1.0})
    # a deployment that thinks the budget is per second: its window would have emptied the counters
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    refusal = ledger.reserve("daily", {"steps": 1.0}, {"steps": 2.0}, window=1)
    assert isinstance(refusal, Refusal) and refusal.dim == "steps"
    detail = ledger.detail("daily")
    assert detail["used"]["steps"] == 2
    assert detail["limits"] == {"steps": 2.0, "window_seconds": 86400.0}


def test_a_limit_only_another_definition_sets_refuses_once_exhausted(ledger: RedisLedger) -> None:
    paid = ledger.reserve("mixed", {"usd": 1.0}, {"usd": 1.0})
    assert isinstance(paid, Reservation)
    ledger.settle(paid, {"usd": 1.0})
    # a deployment whose Scope limits steps only reserves no money, but the scope's money is gone
    refusal = ledger.reserve("mixed", {"steps": 1.0}, {"steps": 100.0})
    assert isinstance(refusal, Refusal) and refusal.dim == "usd" and refusal.limit == 1.0
    assert ledger.detail("mixed")["limits"] == {"steps": 100.0, "usd": 1.0}


def test_raising_a_cap_takes_an_explicit_forget(ledger: RedisLedger) -> None:
    assert isinstance(ledger.reserve("grow", {"steps": 1.0}, {"steps": 1.0}), Reservation)
    assert isinstance(ledger.reserve("grow", {"steps": 1.0}, {"steps": 5.0}), Refusal)  # still capped at 1
    ledger.forget_definitions("grow")
    assert isinstance(ledger.reserve("grow", {"steps": 1.0}, {"steps": 5.0}), Reservation)
    assert ledger.detail("grow")["definitions"] == [{"steps": 5.0}]


def test_memory_ledger_keeps_the_tightest_definition_and_the_longest_window() -> None:
    store = MemoryLedger()
    assert isinstance(store.reserve("s", {"steps": 1.0}, {"steps": 2.0, "usd": 5.0}, window=60), Reservation)
    assert isinstance(store.reserve("s", {"usd": 1.0}, {"usd": 1.0}, window=3600), Reservation)
    # a one-second window elsewhere neither empties the hour's counters nor lifts the money cap
    assert isinstance(store.reserve("s", {"usd": 0.5}, {"usd": 10.0}, window=1), Refusal)
    assert isinstance(store.reserve("s", {"steps": 1.0}, {"steps": 10.0}), Reservation)  # steps 2 applies
    assert isinstance(store.reserve("s", {"steps": 1.0}, {"steps": 10.0}), Refusal)
    assert store.read("s")["usd"] == 1.0 and store.read("s")["steps"] == 2.0
