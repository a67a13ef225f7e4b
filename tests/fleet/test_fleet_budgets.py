"""Fleet budgets: runs with Budget(scope=Scope(...)) draw from one shared budget in Redis, on every limit."""

from __future__ import annotations

import threading
import time

import openai
import pytest

import otel_budget
from otel_budget import Budget, Price, RedisLedger, Scope, StopReason
from otel_budget.testing import ScriptedLLM, Turn

PRICES = {"acme-large": Price(input_per_mtok=1000.0, output_per_mtok=1000.0)}  # $0.001 per token


def ask(client: openai.OpenAI, **kwargs) -> None:
    client.chat.completions.create(model="acme-large", messages=[{"role": "user", "content": "hi"}], **kwargs)


def agent(client: openai.OpenAI, name: str, scope: Scope, calls: int = 50, **kwargs) -> otel_budget.RunOutcome:
    with otel_budget.run(name, budget=Budget(scope=scope)) as run:
        for _ in range(calls):
            ask(client, **kwargs)
    assert run.outcome is not None
    return run.outcome


def test_fleet_steps_cap_holds_across_concurrent_runs(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger, PRICES)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    scope = Scope(name="nightly", max_steps=10)
    outcomes: list[otel_budget.RunOutcome] = []
    threads = [threading.Thread(target=lambda i=i: outcomes.append(agent(oai, f"agent-{i}", scope))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(llm.requests) == 10
    assert ledger.read("nightly")["steps"] == 10
    assert {o.stop_reason for o in outcomes} == {StopReason.STEPS}
    assert sum(o.usage.model_calls for o in outcomes) == 10
    assert all("shared budget 'nightly'" in o.detail for o in outcomes)


def test_fleet_money_cap_is_shared_by_separate_runs(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger, PRICES)
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=10)  # $0.02 per call
    scope = Scope(name="invoices", max_usd=0.05)
    first = agent(oai, "first", scope, calls=2, max_tokens=10)
    assert first.completed and first.usage.cost_usd == pytest.approx(0.04)
    second = agent(oai, "second", scope, max_tokens=10)
    assert second.stop_reason is StopReason.COST and second.limit == "max_usd"
    assert "shared budget 'invoices'" in second.detail
    assert len(llm.requests) == 2
    assert ledger.read("invoices")["usd"] == pytest.approx(0.04)


def test_fleet_money_cap_reserves_a_worst_case_for_calls_without_output_limit(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger, PRICES)
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=10)
    outcome = agent(oai, "first", Scope(name="small", max_usd=1.0))  # 4096 output tokens would cost $4
    assert outcome.stop_reason is StopReason.COST
    assert len(llm.requests) == 0


def test_fleet_token_cap_holds(ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    instrumented(ledger, PRICES)
    llm.default = Turn(text="ok", input_tokens=20, output_tokens=20)
    scope = Scope(name="tokens", max_total_tokens=100)
    outcome = agent(oai, "a", scope, max_tokens=20)
    assert outcome.stop_reason is StopReason.TOKENS
    used = ledger.read("tokens")
    assert used["total_tokens"] <= 100
    assert used["total_tokens"] == 40 * len(llm.requests) and len(llm.requests) >= 1


def test_fleet_window_refills_in_the_next_window(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger, PRICES)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    window = 2.0  # room for a run of three calls in one window on a loaded machine
    scope = Scope(name="per-window", max_steps=2, window_seconds=window)
    time.sleep(window - time.time() % window + 0.01)
    assert agent(oai, "a", scope).usage.model_calls == 2
    time.sleep(window - time.time() % window + 0.01)
    assert agent(oai, "b", scope).usage.model_calls == 2
    assert len(llm.requests) == 4


def test_paid_tools_and_run_charges_count_in_the_fleet(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger, PRICES)

    @otel_budget.tool(cost_usd=0.3)
    def lookup(q: str) -> str:
        return q

    scope = Scope(name="tools", max_usd=1.0, max_tool_calls=5)
    with otel_budget.run("a", budget=Budget(scope=scope)) as run:
        lookup("x")
        run.charge(0.2, name="browser")
        lookup("y")
        lookup("z")  # 0.3 + 0.2 + 0.3 + 0.3 > 1.0
    assert run.outcome is not None and run.outcome.stop_reason is StopReason.COST
    used = ledger.read("tools")
    assert used["usd"] == pytest.approx(0.8) and used["tool_calls"] == 2
