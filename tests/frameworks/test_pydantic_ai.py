"""pydantic-ai for real: an `Agent` with its OpenAI chat model pointed at ScriptedLLM over loopback."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent, UsageLimitExceeded, UsageLimits  # noqa: E402
from pydantic_ai.capabilities import Instrumentation  # noqa: E402
from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.pydantic_ai import BudgetLimits, outcome  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "pai-test-model"
PRICE = otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)
executed: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


def _agent(llm: ScriptedLLM, name: str | None = "researcher", **kwargs: Any) -> Agent[None, Any]:
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=llm.openai_base_url, api_key="x"))
    agent: Agent[None, Any] = Agent(model, name=name, **kwargs)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up."""
        executed.append(q)
        return f"found {q}"

    return agent


def _fresh_lookups(llm: ScriptedLLM, **turn: Any) -> None:
    turns = iter(range(1000))
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})], **turn)


def _spans(otel: Any, prefix: str) -> list:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def _run_span(otel: Any, name: str = "researcher") -> Any:
    (span,) = [s for s in _spans(otel, f"invoke_agent {name}") if s.instrumentation_scope.name == "otel_budget"]
    return span


def _llm_spans(otel: Any) -> list:
    return [s for s in otel.get_finished_spans() if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]


def test_a_stop_ends_run_sync_with_a_result_carrying_the_wrap_up(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    result = _agent(scripted_llm).run_sync("research", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=2))])
    assert len(scripted_llm.requests) == 2 and executed == ["0", "1"]
    assert result.output.startswith("Stopped at a limit: max_steps (2 of 2")
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps" and done.limit == "max_steps"
    assert done.wrap_up == result.output and done.usage.model_calls == 2
    span = _run_span(otel)
    assert span.attributes["stop.reason"] == "steps" and span.attributes["otel_budget.limit.steps"] == 2
    llm_spans, tools = _llm_spans(otel), _spans(otel, "execute_tool lookup")
    assert len(llm_spans) == 2 and len(tools) == 2  # the refused call has no span
    assert all(s.parent.span_id == span.context.span_id for s in llm_spans + tools)


@pytest.mark.parametrize("switched_on", ["agent.instrument", "Instrumentation capability"])
def test_with_pydantic_ais_instrumentation_each_request_has_one_llm_span_and_each_tool_one_span(
    scripted_llm: ScriptedLLM, tracer_provider: Any, otel: Any, switched_on: str
) -> None:
    _fresh_lookups(scripted_llm)
    settings = InstrumentationSettings(tracer_provider=tracer_provider)
    if switched_on == "agent.instrument":
        agent = _agent(scripted_llm)
        agent.instrument = settings
    else:
        agent = _agent(scripted_llm, capabilities=[Instrumentation(settings=settings)])
    result = agent.run_sync("research", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=2))])
    assert result.output.startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 2
    llm_spans = _llm_spans(otel)
    assert len(llm_spans) == 2  # one per request that reached the server; none for the refused one
    ours = _run_span(otel)
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in llm_spans) == ours.attributes[
        "otel_budget.used.input_tokens"]
    assert len(_spans(otel, "execute_tool lookup")) == 2 == len(executed)
    (theirs,) = [s for s in _spans(otel, "invoke_agent researcher") if s.instrumentation_scope.name == "pydantic-ai"]
    assert theirs.parent.span_id == ours.context.span_id
    assert all(s.parent.span_id == theirs.context.span_id for s in llm_spans)


async def test_async_run_stopped_by_the_cost_cap_never_overshoots(scripted_llm: ScriptedLLM, instrument_with: Any,
                                                                   otel: Any) -> None:
    instrument_with(prices={MODEL: PRICE})
    _fresh_lookups(scripted_llm, output_tokens=300)
    result = await _agent(scripted_llm).run("spend", capabilities=[BudgetLimits(otel_budget.Budget(max_usd=0.05))])
    assert result.output.startswith("Stopped at a limit: max_usd")
    done = outcome(result)
    assert done is not None and done.stop_reason == "cost" and done.usage.cost_usd <= 0.05
    assert done.usage.model_calls == len(scripted_llm.requests) == len(_llm_spans(otel))


async def test_run_stream_ends_with_the_wrap_up_as_its_output(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm)
    async with agent.run_stream("research", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=1))]) as streamed:
        text = await streamed.get_output()
    assert text.startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 1 and executed == ["0"]
    assert _run_span(otel).attributes["stop.reason"] == "steps"


async def test_iter_is_a_run_too(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm)
    async with agent.iter("research", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=1))]) as agent_run:
        async for _node in agent_run:
            pass
    assert agent_run.result is not None
    assert agent_run.result.output.startswith("Stopped at a limit: max_steps")
    assert outcome(agent_run.result).stop_reason == "steps"
    assert len(scripted_llm.requests) == 1


def test_a_repeated_tool_call_is_stopped_with_the_wrap_up(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    result = _agent(scripted_llm).run_sync("loop", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=10))])
    assert result.output.startswith("Stopped at a limit: max_repeats")
    assert outcome(result).stop_reason == "repeat"
    assert len(scripted_llm.requests) == 3 and executed == ["same", "same"]


def test_an_answer_cut_by_the_token_cap_is_replaced_by_the_wrap_up(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(text="word " * 2000, output_tokens=2000))
    result = _agent(scripted_llm).run_sync("write",
                                           capabilities=[BudgetLimits(otel_budget.Budget(max_total_tokens=300))])
    (request,) = scripted_llm.requests
    assert 0 < request.body["max_completion_tokens"] < 300
    assert result.output.startswith("Stopped at a limit: max_total_tokens") and "word word" not in result.output
    assert outcome(result).stop_reason == "tokens"


def test_pydantic_ais_own_usage_limits_keep_working_and_end_the_run_steps(scripted_llm: ScriptedLLM,
                                                                          otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    with pytest.raises(UsageLimitExceeded, match="request_limit of 2") as info:
        _agent(scripted_llm).run_sync("research", usage_limits=UsageLimits(request_limit=2),
                                      capabilities=[BudgetLimits(otel_budget.Budget(max_steps=10))])
    assert len(scripted_llm.requests) == 2
    assert _run_span(otel).attributes["stop.reason"] == "steps"
    done = outcome(info.value)
    assert done.stop_reason == "steps" and done.limit == "request_limit"
    assert done.wrap_up.startswith("Stopped at a limit: request_limit")


class Report(BaseModel):
    summary: str


def test_a_structured_output_run_raises_budget_exceeded_with_the_final_outcome(scripted_llm: ScriptedLLM,
                                                                               otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, output_type=Report)
    with pytest.raises(otel_budget.BudgetExceeded) as info:
        agent.run_sync("research", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=1))])
    assert info.value.reason == "steps"
    assert info.value.outcome.wrap_up.startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 1
    assert _run_span(otel).attributes["stop.reason"] == "steps"


def test_the_agents_own_budget_capability_and_the_default_budget(scripted_llm: ScriptedLLM, instrument_with: Any,
                                                                  otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, capabilities=[BudgetLimits(otel_budget.Budget(max_steps=1))])
    assert outcome(agent.run_sync("research")).limit == "max_steps"
    assert len(scripted_llm.requests) == 1
    instrument_with(budget=otel_budget.Budget(max_steps=2))
    scripted_llm.requests.clear()
    result = _agent(scripted_llm, name=None).run_sync("research")
    assert outcome(result).stop_reason == "steps" and len(scripted_llm.requests) == 2
    assert _spans(otel, "invoke_agent ")[-1].attributes["gen_ai.agent.name"] in {"agent", "_agent"}


def test_a_healthy_run_ends_done_with_the_models_answer(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})]), Turn(text="All done."))
    result = _agent(scripted_llm).run_sync("find a", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=5))])
    assert result.output == "All done."
    assert outcome(result).stop_reason == "done"
    assert _run_span(otel).attributes["otel_budget.used.steps"] == 2 == len(scripted_llm.requests)


async def test_a_delegate_agent_draws_from_the_parents_budget(scripted_llm: ScriptedLLM, otel: Any) -> None:
    delegate = _agent(scripted_llm, name="delegate")
    lead_model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=scripted_llm.openai_base_url, api_key="x"))
    lead: Agent[None, str] = Agent(lead_model, name="lead")

    @lead.tool_plain
    async def research(topic: str) -> str:
        """Delegate research."""
        return (await delegate.run(topic)).output

    turns = iter(range(1000))

    def respond(req: Any) -> Turn:
        n = next(turns)
        return Turn(tool_calls=[ToolCall("research", {"topic": "t"})] if n == 0 else [ToolCall("lookup", {"q": str(n)})])

    scripted_llm.responder = respond
    result = await lead.run("go", capabilities=[BudgetLimits(otel_budget.Budget(max_steps=3))])
    assert len(scripted_llm.requests) == 3
    (sub,) = [s for s in _spans(otel, "invoke_agent delegate")]
    assert sub.attributes["stop.reason"] == "steps"
    assert sub.context.trace_id == _run_span(otel, "lead").context.trace_id
    assert outcome(result).stop_reason == "steps"


def test_budget_limits_refuses_what_is_not_a_budget() -> None:
    with pytest.raises(TypeError, match="takes an otel_budget.Budget, not dict"):
        BudgetLimits({"max_steps": 1})  # type: ignore[arg-type]


def test_a_call_whose_reservation_does_not_fit_is_not_sent_and_answered_by_the_wrap_up(scripted_llm: ScriptedLLM,
                                                                                       otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    result = _agent(scripted_llm).run_sync("research", model_settings={"max_tokens": 1000},
                                           capabilities=[BudgetLimits(otel_budget.Budget(max_total_tokens=1200))])
    assert len(scripted_llm.requests) == 1  # the second call's 1000-token reservation did not fit what was left
    assert result.output.startswith("Stopped at a limit: max_total_tokens")
    assert "was not sent" in result.output
    assert len(_llm_spans(otel)) == 1


def test_uninstrument_restores_pydantic_ai_to_the_very_same_objects() -> None:
    from pydantic_ai.capabilities.instrumentation import Instrumentation

    otel_budget.uninstrument()
    before = (vars(Agent)["iter"], vars(Instrumentation)["wrap_model_request"])
    otel_budget.instrument()
    assert vars(Agent)["iter"] is not before[0]
    otel_budget.uninstrument()
    assert (vars(Agent)["iter"], vars(Instrumentation)["wrap_model_request"]) == before
    assert vars(Agent)["iter"] is before[0] and vars(Instrumentation)["wrap_model_request"] is before[1]


async def test_a_streamed_call_whose_reservation_does_not_fit_is_answered_by_a_wrap_up_stream(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm)
    async with agent.run_stream("research", model_settings={"max_tokens": 1000},
                                capabilities=[BudgetLimits(otel_budget.Budget(max_total_tokens=1200))]) as streamed:
        text = await streamed.get_output()
    assert len(scripted_llm.requests) == 1 and scripted_llm.requests[0].stream
    assert text.startswith("Stopped at a limit: max_total_tokens") and "was not sent" in text
    assert len(_llm_spans(otel)) == 1
    assert _run_span(otel).attributes["stop.reason"] == "tokens"


async def test_a_streamed_answer_cut_by_the_token_cap_ends_the_run_tokens(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(text="word " * 2000, output_tokens=2000))
    agent = _agent(scripted_llm)
    async with agent.run_stream("write",
                                capabilities=[BudgetLimits(otel_budget.Budget(max_total_tokens=300))]) as streamed:
        await streamed.get_output()
    assert scripted_llm.requests[0].body["max_completion_tokens"] < 300
    assert _run_span(otel).attributes["stop.reason"] == "tokens"  # the cut text was streamed; the run is not done


async def test_a_streamed_answer_cut_by_the_token_cap_ends_with_the_wrap_up_not_the_cut_text(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.script(Turn(text="word " * 2000, output_tokens=2000))
    agent = _agent(scripted_llm)
    budget = otel_budget.Budget(max_total_tokens=300)
    async with agent.run_stream("write", capabilities=[BudgetLimits(budget)]) as streamed:
        seen = [text async for text in streamed.stream_text(debounce_by=None)]
        output = await streamed.get_output()
    (request,) = scripted_llm.requests
    assert 0 < request.body["max_completion_tokens"] < 300
    assert output.startswith("Stopped at a limit: max_total_tokens") and "word word" not in output
    # The consumer already got the cut text as it streamed; its stream ends with the wrap-up after it.
    assert seen[-1].startswith("word word") and seen[-1].endswith("\n\n" + output)
    history = streamed.all_messages()[-1]
    assert history.parts[0].content == output and len(history.parts) == 1
    assert _run_span(otel).attributes["stop.reason"] == "tokens"
    assert len(_llm_spans(otel)) == 1
