"""Money: zero overshoot, the output limit the enforcer sets, prices, unpriced calls, charges and paid tools."""

from __future__ import annotations

import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import Turn

ACME = {"acme-large": ob.Price(input_per_mtok=3.0, output_per_mtok=15.0)}


def test_money_cap_is_never_exceeded_when_the_output_limit_is_known(llm, oai):
    ob.instrument(prices=ACME)
    try:
        # the model always writes as much as it may: the worst case the reservation assumed
        llm.default = Turn(text="word " * 500, output_tokens=10_000)
        cap = 0.05
        with ob.run("spender", budget=ob.Budget(max_usd=cap)) as run:
            while True:
                ask(oai, "context " * 400, model="acme-large", max_tokens=500)
        spent = run.outcome.usage.cost_usd
        assert run.outcome.stop_reason is ob.StopReason.COST
        assert spent <= cap
        # and it stopped only when the next worst case really did not fit
        per_call = spent / run.outcome.usage.model_calls
        assert spent + per_call > cap
    finally:
        ob.uninstrument()


def test_enforcer_sets_an_output_limit_that_fits_what_remains(llm, oai):
    ob.instrument(prices=ACME)
    try:
        llm.default = Turn(text="word " * 5000, output_tokens=100_000)  # would run away without a limit
        with ob.run("unbounded", budget=ob.Budget(max_usd=0.02)) as run:
            for _ in range(5):
                ask(oai, "short prompt", model="acme-large")  # no max_tokens from the caller
        sent = [r.body.get("max_completion_tokens") for r in llm.requests]
        assert sent[0] is not None and sent[0] <= 0.02 / 15.0 * 1e6
        assert run.outcome.usage.cost_usd <= 0.02
        assert run.outcome.stop_reason is ob.StopReason.COST
    finally:
        ob.uninstrument()


def test_output_limit_is_left_alone_when_switched_off(llm, oai):
    ob.instrument(prices=ACME)
    try:
        llm.default = Turn(text="ok", output_tokens=5)
        with ob.run("manual", budget=ob.Budget(max_usd=0.001, auto_max_tokens=False)):
            ask(oai, "hi", model="acme-large")
        assert "max_completion_tokens" not in llm.requests[0].body
    finally:
        ob.uninstrument()


def test_unknown_price_with_a_money_cap_is_refused_before_sending(otel, llm, oai):
    llm.default = Turn(text="x")
    with pytest.raises(ob.UnknownPriceError) as err, ob.run("a", budget=ob.Budget(max_usd=1.0)):
        ask(oai, model="mystery-model-9000")
    message = str(err.value)
    assert "mystery-model-9000" in message
    assert "instrument(prices=" in message
    assert llm.requests == []


def test_unknown_price_without_a_money_cap_is_unpriced_never_zero(otel, llm, oai):
    llm.default = Turn(text="x", output_tokens=3)
    with ob.run("a", budget=ob.Budget(max_steps=3)) as run:
        ask(oai, model="mystery-model-9000")
    assert run.outcome.usage.unpriced_calls == 1
    span = otel.chat_spans()[0]
    assert span.attributes["otel_budget.cost.source"] == "unpriced"
    assert "otel_budget.cost.usd" not in span.attributes
    assert otel.run_span("a").attributes["otel_budget.unpriced_calls"] == 1


def test_price_overrides_are_used(llm, oai):
    ob.instrument(prices={"gpt-4o": ob.Price(input_per_mtok=1000.0, output_per_mtok=0.0)})
    try:
        llm.default = Turn(text="x", input_tokens=1000, output_tokens=1)
        with ob.run("a") as run:
            ask(oai)
        assert run.outcome.usage.cost_usd == pytest.approx(1.0)
    finally:
        ob.uninstrument()


def test_charge_counts_against_the_money_cap(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=10, output_tokens=1)
    with ob.run("browser-agent", budget=ob.Budget(max_usd=0.01)) as run:
        run.charge(usd=0.0099, name="browser")
        ask(oai, max_tokens=10)
        ask(oai, max_tokens=10)
    assert run.outcome.stop_reason is ob.StopReason.COST
    assert run.outcome.usage.cost_usd <= 0.01
    assert "incl. browser $0.0099" in run.outcome.wrap_up


def test_paid_tool_is_checked_before_it_runs_and_charged(otel):
    ran = []

    @ob.tool(cost_usd=0.04)
    def web_search(query: str) -> str:
        ran.append(query)
        return "results"

    with ob.run("researcher", budget=ob.Budget(max_usd=0.1)) as run:
        web_search("a")
        web_search("b")
        web_search("c")
    assert ran == ["a", "b"]
    assert run.outcome.stop_reason is ob.StopReason.COST
    assert run.outcome.usage.cost_usd == pytest.approx(0.08)
    tools = otel.spans("execute_tool web_search")
    assert len(tools) == 2
    assert tools[0].attributes["gen_ai.tool.name"] == "web_search"


def test_tool_repetition_and_tool_cap(otel):
    @ob.tool
    def fetch(url: str) -> str:
        return url

    with ob.run("fetcher") as run:
        fetch("a")
        fetch("a")
        fetch("a")  # third identical execution in a row: refused
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert run.outcome.usage.tool_calls == 2

    with ob.run("capped", budget=ob.Budget(max_tool_calls=2)) as capped:
        fetch("a")
        fetch("b")
        fetch("c")
    assert capped.outcome.stop_reason is ob.StopReason.TOOL_CALLS
    assert capped.outcome.usage.tool_calls == 2
