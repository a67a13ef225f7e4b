"""A run whose own limit refused work in a child records that stop: it never ends `done`, and its wrap-up lists
what the whole tree did. A child that stops still returns its outcome to the parent code, which goes on."""

from __future__ import annotations

import time

from _support import ask

import otel_budget as ob
from otel_budget.testing import ToolCall, Turn


def _tool_turns(n: int) -> list[Turn]:
    return [Turn(tool_calls=[ToolCall("lookup", {"q": f"page {i}"})]) for i in range(n)]


def test_parent_whose_step_cap_refused_the_child_stops_at_steps(otel, llm, oai):
    llm.script(Turn(text="plan"), *_tool_turns(6))
    went_on = False
    with ob.run("parent", budget=ob.Budget(max_steps=4)) as parent:
        ask(oai)
        with ob.run("child", budget=ob.Budget(max_steps=10)) as child:
            for _ in range(6):
                ask(oai)  # the child's own cap is 10; the parent's leaves 3
        assert child.outcome.stop_reason is ob.StopReason.STEPS  # the child's outcome reaches the parent code
        went_on = True
    assert went_on
    assert len(llm.requests) == 4
    out = parent.outcome
    assert out.stop_reason is ob.StopReason.STEPS and out.completed is False
    assert out.limit == "max_steps"
    assert out.usage.model_calls == 4 and out.usage.tool_calls == 3
    assert out.wrap_up.startswith("Stopped at a limit: max_steps (4 of 4 model calls used).")
    assert "tools: lookup x3" in out.wrap_up
    assert "in run 'child'" in out.detail
    span = otel.run_span("parent")
    assert span.attributes["stop.reason"] == "steps"
    assert span.attributes["otel_budget.stop.limit"] == "max_steps"
    assert [e.name for e in span.events] == ["otel_budget.stop"]
    assert otel.run_span("child").attributes["stop.reason"] == "steps"


def test_every_run_between_the_refusing_ancestor_and_the_call_records_the_stop(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=100, output_tokens=10)
    with ob.run("top", budget=ob.Budget(max_total_tokens=400)) as top:
        with ob.run("middle") as middle:
            with ob.run("leaf", budget=ob.Budget(max_steps=50)) as leaf:
                for _ in range(10):
                    ask(oai, max_tokens=10)
    sent = len(llm.requests)
    assert 1 <= sent < 10
    assert top.outcome.usage.model_calls == middle.outcome.usage.model_calls == leaf.outcome.usage.model_calls == sent
    for run in (top, middle, leaf):
        assert run.outcome.stop_reason is ob.StopReason.TOKENS, run.name
        assert run.outcome.limit == "max_total_tokens"
        assert otel.run_span(run.name).attributes["stop.reason"] == "tokens"
    assert top.outcome.wrap_up.startswith("Stopped at a limit: max_total_tokens (")
    assert middle.outcome.wrap_up.startswith("Stopped at a limit: max_total_tokens (set by an enclosing run).")


def test_a_child_stopped_by_its_own_cap_leaves_the_parent_done(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("parent", budget=ob.Budget(max_steps=10)) as parent:
        with ob.run("child", budget=ob.Budget(max_steps=2)):
            for _ in range(4):
                ask(oai)
    assert len(llm.requests) == 2
    assert parent.outcome.stop_reason is ob.StopReason.DONE
    assert otel.run_span("parent").attributes["stop.reason"] == "done"


def test_a_child_loop_ended_by_the_parents_budget_stops_the_parent(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("parent", budget=ob.Budget(max_steps=3)) as parent:
        with ob.run("child") as child:
            while child.allows():
                ask(oai)
    assert len(llm.requests) == 3
    assert child.outcome.stop_reason is ob.StopReason.STEPS
    assert parent.outcome.stop_reason is ob.StopReason.STEPS
    assert otel.run_span("parent").attributes["stop.reason"] == "steps"


def test_parent_tool_cap_exceeded_in_a_child_stops_the_parent_and_refuses_its_next_call(otel, llm, oai):
    llm.script(*_tool_turns(3), Turn(text="never sent"))
    with ob.run("parent", budget=ob.Budget(max_tool_calls=2)) as parent:
        with ob.run("child") as child:
            for _ in range(4):
                ask(oai)
        try:
            ask(oai)  # the parent's own next call: its tool cap is already exceeded
        except ob.BudgetExceeded as exc:
            refused = exc.reason
    assert len(llm.requests) == 3
    assert refused is ob.StopReason.TOOL_CALLS
    assert child.outcome.stop_reason is ob.StopReason.TOOL_CALLS
    assert parent.outcome.stop_reason is ob.StopReason.TOOL_CALLS and parent.outcome.limit == "max_tool_calls"
    assert parent.outcome.usage.tool_calls == 2  # the third request was refused, never counted
    assert "tools: lookup x2" in parent.outcome.wrap_up  # the tools the tree used, the refused one not


def test_shared_scope_of_the_parent_that_refused_the_child_stops_the_parent(otel, llm, oai):
    llm.default = Turn(text="x")
    scope = ob.Scope(name=f"ancestor-stops-{time.monotonic_ns()}", max_steps=2)
    with ob.run("parent", budget=ob.Budget(scope=scope)) as parent:
        with ob.run("child") as child:
            for _ in range(4):
                ask(oai)
    assert len(llm.requests) == 2
    assert child.outcome.stop_reason is ob.StopReason.STEPS
    assert parent.outcome.stop_reason is ob.StopReason.STEPS
    assert f"shared budget '{scope.name}'" in parent.outcome.detail


def test_parent_time_up_in_a_child_stops_the_parent_at_time(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("parent", budget=ob.Budget(max_seconds=0.2)) as parent:
        with ob.run("child") as child:
            time.sleep(0.3)  # past the parent's deadline; the child has no time limit of its own
            ask(oai)
    assert llm.requests == []
    assert child.outcome.stop_reason is ob.StopReason.TIME
    assert parent.outcome.stop_reason is ob.StopReason.TIME and parent.outcome.limit == "max_seconds"


def test_tools_executed_in_a_child_are_in_the_parents_wrap_up(otel, llm, oai):
    @ob.tool
    def fetch(url: str) -> str:
        return "page"

    with ob.run("parent", budget=ob.Budget(max_tool_calls=10)) as parent:
        with ob.run("child"):
            fetch("a")
            fetch("b")
        fetch("c")
    assert parent.outcome.completed
    assert parent.outcome.usage.tool_calls == 3
    assert "tools: fetch x3" in parent.outcome.wrap_up
