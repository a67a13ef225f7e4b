"""Numbers that make no sense never switch a cap off: NaN, infinite and negative costs and bools as limits are
refused with a clear error, infinity means unlimited, and tool arguments of any shape are canonicalized."""

from __future__ import annotations

import math

import pydantic
import pytest
from _support import ask

import otel_budget as ob
from otel_budget.core.tools import begin_tool, end_tool
from otel_budget.model.signatures import canonical_arguments
from otel_budget.testing import Turn

NAN, INF = float("nan"), float("inf")


def deep(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("bad", [NAN, INF, -0.01, True, "0.01"], ids=["nan", "inf", "negative", "bool", "str"])
def test_a_charge_that_is_no_cost_is_refused_and_the_money_cap_holds(otel, llm, oai, bad):
    llm.default = Turn(text="ok", output_tokens=10)
    with ob.run("charges", budget=ob.Budget(max_usd=0.0005)) as run:
        with pytest.raises(ValueError, match=r"charge\(usd=\.\.\.\)=.*finite amount") as err:
            run.charge(usd=bad)
        assert repr(bad) in str(err.value)
        for _ in range(30):
            ask(oai, max_tokens=10)  # about $0.0001 each, worst case reserved
    assert 0 < len(llm.requests) < 30
    assert run.outcome.stop_reason is ob.StopReason.COST
    assert run.outcome.usage.cost_usd <= 0.0005


@pytest.mark.parametrize("bad", [NAN, INF, -1.0, True], ids=["nan", "inf", "negative", "bool"])
def test_a_tool_cost_that_is_no_cost_is_refused_when_the_tool_is_declared(bad):
    with pytest.raises(ValueError, match=r"tool\(cost_usd=\.\.\.\)=.*finite amount"):

        @ob.tool(cost_usd=bad)
        def search(query: str) -> str:
            return query


def test_a_framework_tool_cost_that_is_nan_is_refused_inside_a_run(otel):
    with ob.run("framework", budget=ob.Budget(max_usd=0.05)) as run:
        with pytest.raises(ValueError, match="cost_usd of tool browse"):
            begin_tool("browse", {"url": "x"}, cost_usd=NAN)
        state = begin_tool("browse", {"url": "x"}, cost_usd=0.01)
        end_tool(state, "page")
    assert run.outcome.usage.cost_usd == pytest.approx(0.01)
    assert math.isfinite(run.outcome.usage.cost_usd)


def test_an_infinite_or_nan_price_is_refused():
    for bad in (NAN, INF):
        with pytest.raises(pydantic.ValidationError, match="finite number"):
            ob.Price(input_per_mtok=bad, output_per_mtok=1.0)


@pytest.mark.parametrize("field", ["max_steps", "max_tool_calls", "max_seconds", "max_input_tokens", "max_usd",
                                   "max_repeats", "max_depth", "near"])
def test_a_bool_is_not_a_limit(field):
    with pytest.raises(pydantic.ValidationError, match=f"{field}=True: a bool is not a limit"):
        ob.Budget(**{field: True})


def test_a_bool_is_not_a_scope_limit():
    with pytest.raises(pydantic.ValidationError, match="max_usd=True: a bool is not a limit"):
        ob.Scope(name="fleet", max_usd=True)


@pytest.mark.parametrize("field", ["max_steps", "max_seconds", "max_output_tokens", "max_usd", "max_repeats"])
def test_infinity_means_unlimited(field):
    assert getattr(ob.Budget(**{field: INF}), field) is None


def test_an_infinite_time_limit_lets_calls_through(otel, llm, oai):
    llm.default = Turn(text="ok")
    with ob.run("forever", budget=ob.Budget(max_seconds=INF, max_steps=3)) as run:
        for _ in range(5):
            ask(oai)
    assert len(llm.requests) == 3
    assert run.outcome.stop_reason is ob.StopReason.STEPS


def test_an_infinite_scope_window_never_starts_anew(otel, llm, oai):
    llm.default = Turn(text="ok")
    scope = ob.Scope(name="bad-numbers-window", max_steps=2, window_seconds=INF)
    assert scope.window_seconds is None
    with ob.run("windowed", budget=ob.Budget(scope=scope)) as run:
        for _ in range(4):
            ask(oai)
    assert len(llm.requests) == 2
    assert run.outcome.stop_reason is ob.StopReason.STEPS


def test_deeply_nested_tool_arguments_are_canonicalized_and_still_counted_as_repeats(otel):
    runs = []

    @ob.tool
    def store(doc: dict) -> str:
        runs.append(1)
        return "stored"

    doc = deep(5_000)
    with ob.run("deep", budget=ob.Budget(max_repeats=3)) as run:
        for _ in range(5):
            store(doc)
    assert len(runs) == 2  # the third identical call is refused before it runs
    assert run.outcome.stop_reason is ob.StopReason.REPEAT


def test_canonical_arguments_never_crash_and_stay_bounded():
    nested = deep(5_000)
    assert canonical_arguments(nested) == canonical_arguments(deep(5_000))
    assert canonical_arguments(nested) != canonical_arguments(deep(4_999))
    circular: list = []
    circular.append(circular)
    assert canonical_arguments(circular).startswith("sha256:")
    assert len(canonical_arguments({"n": 10**5000})) < 100  # an int too long to print as text
    assert canonical_arguments("[" * 5_000 + "]" * 5_000) == "[" * 5_000 + "]" * 5_000  # the text itself
    assert canonical_arguments({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'  # plain arguments as before
