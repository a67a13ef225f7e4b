"""Metrics of the contract, and the wrap-up in both modes."""

from __future__ import annotations

from _support import ask

import otel_budget as ob
from otel_budget.testing import ToolCall, Turn


def test_contract_metrics_are_emitted(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=1000, output_tokens=10)
    with ob.run("metered", budget=ob.Budget(max_steps=2)):
        ask(oai)
        ask(oai)
        ask(oai)
    runs = otel.metric_points("otel_budget.runs")
    assert [(p.attributes["run_name"], p.attributes["stop_reason"], p.value) for p in runs] == [
        ("metered", "steps", 1)
    ]
    cost = otel.metric_points("otel_budget.cost.usd")
    assert cost[0].attributes == {"gen_ai.request.model": "gpt-4o", "gen_ai.provider.name": "openai",
                                  "run_name": "metered"}
    assert cost[0].value > 0
    tokens = otel.metric_points("gen_ai.client.token.usage")
    assert {p.attributes["gen_ai.token.type"] for p in tokens} == {"input", "output"}
    assert sum(p.count for p in tokens) == 4
    assert otel.metric_points("gen_ai.client.operation.duration")[0].count == 2
    near = otel.metric_points("otel_budget.runs.near_cap")
    assert [p.value for p in near] == [1]


def test_utilization_gauge_reflects_active_runs_only(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=10, output_tokens=1)
    with ob.run("active", budget=ob.Budget(max_steps=4)):
        ask(oai)
        ask(oai)
        during = {p.attributes["dimension"]: p.value for p in otel.metric_points("otel_budget.run.utilization")
                  if p.attributes["run_name"] == "active"}
        assert during["steps"] == 0.5
    after = {p.attributes["dimension"]: p.value for p in otel.metric_points("otel_budget.run.utilization")
             if p.attributes["run_name"] == "active"}
    assert after["steps"] == 0.0


def test_template_wrap_up_is_honest_about_a_stop(otel, llm, oai):
    llm.default = Turn(tool_calls=[ToolCall("next_page", {})], input_tokens=100, output_tokens=5)
    with ob.run("portal", budget=ob.Budget(max_steps=2, max_repeats=None)) as run:
        while True:
            ask(oai)
    text = run.outcome.wrap_up
    assert text.startswith("Stopped at a limit: max_steps (2 of 2 model calls used).")
    assert "NOT complete" in text
    assert "next_page x2" in text
    assert "Completed" not in text


def test_model_wrap_up_makes_one_short_tool_less_call_within_the_cap(otel, llm, oai):
    llm.responder = lambda req: (
        Turn(text="I read 2 pages; the invoice total is still missing.", input_tokens=50, output_tokens=12)
        if "stopped by its budget" in str(req.body) else Turn(tool_calls=[ToolCall("next_page", {})],
                                                            input_tokens=100, output_tokens=5)
    )
    budget = ob.Budget(max_steps=4, max_repeats=None, wrap_up="model")
    with ob.run("portal", budget=budget) as run:
        while True:
            ask(oai, tools=[{"type": "function", "function": {"name": "next_page", "parameters": {}}}])
    text = run.outcome.wrap_up
    assert text.startswith("Stopped at a limit: max_steps")
    assert "invoice total is still missing" in text
    last = llm.requests[-1].body
    assert "tools" not in last and last.get("max_completion_tokens")
    assert run.outcome.usage.model_calls == 4  # three agent turns plus the wrap-up, never more than the cap


def test_each_kind_of_call_gets_its_own_metric_attributes(otel, llm, oai):
    """Metric attribute sets are kept per kind of call: a run name, a model, an answer's model or a failure
    never borrows another kind's."""
    import openai

    llm.script(Turn(text="x", input_tokens=10, output_tokens=1),
               Turn(text="x", input_tokens=10, output_tokens=1, model="gpt-4o-2024-08-06"),
               Turn(text="x", input_tokens=10, output_tokens=1),
               Turn(status=400, error_message="bad request"),
               Turn(text="x", input_tokens=10, output_tokens=1))
    with ob.run("first"):
        ask(oai)
        ask(oai)
    with ob.run("second"):
        ask(oai)
        try:
            ask(oai, model="gpt-4o-mini")
        except openai.BadRequestError:
            pass
        ask(oai, model="gpt-4o-mini")
    cost = {(p.attributes["run_name"], p.attributes["gen_ai.request.model"]): p.value
            for p in otel.metric_points("otel_budget.cost.usd")}
    assert set(cost) == {("first", "gpt-4o"), ("second", "gpt-4o"), ("second", "gpt-4o-mini")}
    durations = {(p.attributes["gen_ai.request.model"], p.attributes.get("gen_ai.response.model"),
                  p.attributes.get("error.type")): p.count
                 for p in otel.metric_points("gen_ai.client.operation.duration")}
    assert durations == {("gpt-4o", "gpt-4o", None): 2, ("gpt-4o", "gpt-4o-2024-08-06", None): 1,
                         ("gpt-4o-mini", None, "BadRequestError"): 1, ("gpt-4o-mini", "gpt-4o-mini", None): 1}


def test_near_cap_is_crossed_exactly_where_utilization_reaches_near(otel):
    # 2.7 / 3 is 0.9000000000000001 >= 0.9, while 3 * 0.9 is 2.7000000000000002 > 2.7: a use compared with
    # limit * near alone would miss this crossing.
    with ob.run("edge", budget=ob.Budget(max_usd=3, near=0.9)) as run:
        run.charge(2.6)
        assert [p.value for p in otel.metric_points("otel_budget.runs.near_cap")] == []
        run.charge(0.1)
        assert run.node.near_crossed
    assert [p.value for p in otel.metric_points("otel_budget.runs.near_cap")] == [1]
    with ob.run("below", budget=ob.Budget(max_usd=3, near=0.9)) as run:
        run.charge(2.69)
        assert not run.node.near_crossed


def test_near_cap_is_crossed_by_model_calls_in_the_run_and_its_ancestors_once_each(otel, llm, oai):
    # Each call uses 20 tokens. The parent (max_total_tokens 100, near 0.5, and max_seconds: its time stays far)
    # crosses at 60 of them, its child (max_total_tokens 50, near 0.7, no time limit) at 40.
    llm.default = Turn(text="x", input_tokens=10, output_tokens=10)

    def near_cap() -> dict[str, int]:
        return {p.attributes["run_name"]: p.value for p in otel.metric_points("otel_budget.runs.near_cap")}

    with ob.run("parent", budget=ob.Budget(max_total_tokens=100, max_seconds=3600, near=0.5)) as parent:
        ask(oai)
        with ob.run("child", budget=ob.Budget(max_total_tokens=50, near=0.7)) as child:
            ask(oai)  # 40 of the parent's 100, 20 of the child's 50
            assert (parent.node.near_crossed, child.node.near_crossed) == (False, False)
            assert near_cap() == {}
            ask(oai)  # 60 and 40
            assert (parent.node.near_crossed, child.node.near_crossed) == (True, True)
        ask(oai)
        assert near_cap() == {"parent": 1, "child": 1}
    assert len(llm.requests) == 4


def test_near_cap_counts_the_run_s_time(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=10, output_tokens=1)
    with ob.run("slow", budget=ob.Budget(max_seconds=3600, near=0.5)) as run:
        ask(oai)
        assert not run.node.near_crossed
        run.node.started -= 1800  # half of max_seconds has passed
        ask(oai)
        assert run.node.near_crossed
