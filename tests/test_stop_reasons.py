"""Every stop reason the core can reach, with the real openai SDK against ScriptedLLM."""

from __future__ import annotations

import asyncio

import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import ToolCall, Turn


def test_healthy_run_ends_done_with_run_span_and_children(otel, llm, oai):
    llm.script(Turn(tool_calls=[ToolCall("read", {"page": 1})]), Turn(text="total: 42"))
    with ob.run("invoice-agent", budget=ob.Budget(max_steps=5)) as run:
        ask(oai)
        ask(oai, "page 1 says 42")
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert run.outcome.completed
    assert run.outcome.wrap_up.startswith("Completed")
    span = otel.run_span("invoice-agent")
    assert span.attributes["stop.reason"] == "done"
    assert span.attributes["otel_budget.used.steps"] == 2
    children = [s for s in otel.chat_spans() if s.parent and s.parent.span_id == span.context.span_id]
    assert len(children) == 2
    assert [c.attributes["otel_budget.turn"] for c in children] == [1, 2]


def test_steps_cap_stops_before_the_call_is_sent(otel, llm, oai):
    llm.default = Turn(text="still working")
    with ob.run("agent", budget=ob.Budget(max_steps=3)) as run:
        for _ in range(10):
            ask(oai)
    assert run.outcome.stop_reason is ob.StopReason.STEPS
    assert run.outcome.limit == "max_steps"
    assert len(llm.requests) == 3
    assert run.outcome.wrap_up.startswith("Stopped at a limit: max_steps")
    assert "NOT complete" in run.outcome.wrap_up
    span = otel.run_span("agent")
    assert span.attributes["stop.reason"] == "steps"
    assert span.attributes["otel_budget.stop.limit"] == "max_steps"
    assert [e.name for e in span.events] == ["otel_budget.stop"]


def test_allows_loop_records_the_limit(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("loop", budget=ob.Budget(max_steps=4)) as run:
        n = 0
        while run.allows():
            ask(oai)
            n += 1
    assert n == 4
    assert run.outcome.stop_reason is ob.StopReason.STEPS
    assert run.outcome.usage.model_calls == 4


def test_tool_calls_cap(otel, llm, oai):
    calls = iter(range(100))
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("search", {"q": next(calls)})])
    with ob.run("agent", budget=ob.Budget(max_tool_calls=4)) as run:
        for _ in range(10):
            ask(oai)
    assert run.outcome.stop_reason is ob.StopReason.TOOL_CALLS
    assert len(llm.requests) == 5  # the 5th response asked for a 5th tool: no further call


def test_time_cap_stops_before_next_call_and_bounds_call_in_flight(otel, llm, oai):
    llm.script(Turn(text="a", delay=0.3), Turn(text="b", delay=5.0))
    with ob.run("slow", budget=ob.Budget(max_seconds=0.6)) as run:
        ask(oai)
        ask(oai)  # in flight when the time runs out: the SDK timeout was lowered to what remained
        ask(oai)
    assert run.outcome.stop_reason is ob.StopReason.TIME
    assert run.outcome.limit == "max_seconds"
    assert run.outcome.usage.seconds < 4.0
    assert len(llm.requests) == 2


def test_total_tokens_cap(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=400, output_tokens=50)
    with ob.run("agent", budget=ob.Budget(max_total_tokens=1000)) as run:
        for _ in range(10):
            ask(oai, max_tokens=50)
    assert run.outcome.stop_reason is ob.StopReason.TOKENS
    assert run.outcome.limit == "max_total_tokens"
    assert run.outcome.usage.total_tokens <= 1000
    assert len(llm.requests) == 2


def test_cost_cap(otel, llm, oai):
    llm.default = Turn(text="x", output_tokens=100)  # input tokens: the request's size / 4, as sent
    # gpt-4o: $2.50 / $10 per MTok -> about $0.026 per call of 10k input tokens
    with ob.run("agent", budget=ob.Budget(max_usd=0.1)) as run:
        for _ in range(10):
            ask(oai, "invoice line " * 3000, max_tokens=100)
    assert run.outcome.stop_reason is ob.StopReason.COST
    assert run.outcome.limit == "max_usd"
    assert run.outcome.usage.cost_usd <= 0.1
    assert "max_usd" in run.outcome.wrap_up.split(".")[0]


def test_repeat_stops_the_same_tool_with_the_same_arguments(otel, llm, oai):
    llm.default = Turn(tool_calls=[ToolCall("next_page", {"page": 2, "portal": "acme"})])
    with ob.run("stuck", budget=ob.Budget(max_steps=50)) as run:
        while run.allows():
            ask(oai)
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert run.outcome.limit == "max_repeats"
    assert len(llm.requests) == 3
    assert "next_page" in run.outcome.wrap_up


def test_repeat_uses_canonical_arguments(otel, llm, oai):
    llm.script(
        Turn(tool_calls=[ToolCall("f", {"a": 1, "b": 2})]),
        Turn(tool_calls=[ToolCall("f", {"b": 2, "a": 1})]),
        Turn(tool_calls=[ToolCall("f", {"a": 1, "b": 3})]),
        Turn(tool_calls=[ToolCall("f", {"a": 1, "b": 3})]),
        Turn(text="done"),
    )
    with ob.run("agent") as run:
        for _ in range(5):
            ask(oai)
    assert run.outcome.stop_reason is ob.StopReason.DONE


def test_depth_stops_delegation_and_the_delegate_result_reaches_the_parent(otel, llm, oai):
    llm.default = Turn(text="x")
    with ob.run("boss", budget=ob.Budget(max_depth=2)) as boss:
        with ob.run("lead") as lead:
            with ob.run("intern") as intern:
                ask(oai)
            ask(oai)
        ask(oai)
    assert intern.outcome.stop_reason is ob.StopReason.DEPTH
    assert intern.outcome.wrap_up.startswith("Stopped at a limit: max_depth")
    assert lead.outcome.stop_reason is ob.StopReason.DONE
    assert boss.outcome.stop_reason is ob.StopReason.DONE
    assert len(llm.requests) == 2


def test_error_in_the_agent_is_recorded_and_propagates(otel, llm, oai):
    with pytest.raises(ZeroDivisionError), ob.run("broken") as run:
        1 / 0  # noqa: B018
    assert run.outcome.stop_reason is ob.StopReason.ERROR
    span = otel.run_span("broken")
    assert span.status.status_code.name == "ERROR"


def test_cancelled_task_is_recorded(otel, llm, aoai):
    llm.default = Turn(text="x", delay=5)

    async def agent():
        async with ob.run("cancel-me") as run:
            await aoai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        return run

    async def main():
        task = asyncio.create_task(agent())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert otel.run_span("cancel-me").attributes["stop.reason"] == "cancelled"
    chat = otel.chat_spans()
    assert len(chat) == 1 and chat[0].end_time is not None


def test_calls_outside_a_run_are_traced_and_never_refused(otel, llm, oai):
    ob.instrument(budget=ob.Budget(max_steps=1))  # a default budget applies to runs, not to bare calls
    llm.default = Turn(text="x")
    ask(oai)
    ask(oai)
    assert len(llm.requests) == 2
    assert len(otel.chat_spans()) == 2
    assert not otel.spans("invoke_agent")


def test_default_budget_from_instrument_applies_to_runs_without_one(llm, oai):
    ob.instrument(budget=ob.Budget(max_steps=2))
    try:
        llm.default = Turn(text="x")
        with ob.run("defaulted") as run:
            for _ in range(5):
                ask(oai)
        assert run.outcome.stop_reason is ob.StopReason.STEPS
        assert len(llm.requests) == 2
    finally:
        ob.uninstrument()


def test_decorator_returns_value_or_outcome(otel, llm, oai):
    llm.default = Turn(text="x")

    @ob.run("decorated", budget=ob.Budget(max_steps=1))
    def agent(n: int):
        for _ in range(n):
            ask(oai)
        return "finished"

    assert agent(1) == "finished"
    stopped = agent(3)
    assert isinstance(stopped, ob.RunOutcome)
    assert stopped.stop_reason is ob.StopReason.STEPS
