"""OpenAI Agents SDK for real, over loopback to ScriptedLLM (Responses API through the openai SDK)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

agents = pytest.importorskip("agents")

from agents import (  # noqa: E402
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "agents-test-model"
PRICE = otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)
executed: list[str] = []


@function_tool
def lookup(q: str) -> str:
    """Look something up."""
    executed.append(q)
    return f"found {q}"


@pytest.fixture(autouse=True)
def sdk(scripted_llm: ScriptedLLM, otel) -> Iterator[None]:  # type: ignore[no-untyped-def]
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    executed.clear()
    yield


def _agent(name: str = "helper", tools: list | None = None, **kwargs) -> Agent:  # type: ignore[no-untyped-def]
    return Agent(name=name, model=MODEL, instructions="Help.", tools=[lookup] if tools is None else tools, **kwargs)


def _spans(otel, prefix: str = "") -> list:  # type: ignore[no-untyped-def]
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


async def test_healthy_run_ends_done_with_one_run_span_and_its_children(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})]), Turn(text="All done."))
    result = await Runner.run(_agent(), "find a")
    assert result.final_output == "All done."
    done = outcome(result)
    assert done is not None and done.stop_reason == "done"
    (run_span,) = _spans(otel, "invoke_agent helper")
    chats, tools = _spans(otel, "chat "), _spans(otel, "execute_tool lookup")
    assert len(chats) == 2 and len(tools) == 1
    assert all(s.parent.span_id == run_span.context.span_id for s in chats + tools)
    assert run_span.attributes["stop.reason"] == "done"
    assert len(scripted_llm.requests) == len(chats) == done.usage.model_calls == 2
    assert done.usage.tool_calls == 1 and executed == ["a"]


async def test_stuck_run_is_stopped_by_repeat_with_the_wrap_up_as_final_output(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    result = await Runner.run(_agent(), "loop")
    done = outcome(result)
    assert done is not None and done.stop_reason == "repeat"
    assert result.final_output.startswith("Stopped at a limit: max_repeats")
    assert executed == ["same", "same"]  # the third identical call was not run
    assert _spans(otel, "invoke_agent helper")[0].attributes["stop.reason"] == "repeat"
    assert len(scripted_llm.requests) == len(_spans(otel, "chat ")) == done.usage.model_calls == 3
    assert done.usage.tool_calls == 3  # requested three times, none counted again when executed


async def test_runaway_run_is_stopped_by_cost_without_overshoot(scripted_llm: ScriptedLLM, instrument_with) -> None:  # type: ignore[no-untyped-def]
    instrument_with(prices={MODEL: PRICE})
    turns = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})], output_tokens=300)
    budget = otel_budget.Budget(max_usd=0.05)
    # With the output limit known (max_tokens), the cap holds to the error of one input estimate. (Without
    # one, the enforcer would set a limit that fits, and the SDK treats a truncated answer as an error.)
    agent = _agent(model_settings=ModelSettings(max_tokens=300))
    result = await Runner.run(agent, "spend", context={"otel_budget": budget}, max_turns=100)
    done = outcome(result)
    assert done is not None and done.stop_reason == "cost" and done.limit == "max_usd"
    assert done.usage.cost_usd <= 0.05
    assert done.usage.model_calls == len(scripted_llm.requests) >= 2
    assert "max_usd" in result.final_output


async def test_sub_agent_draws_from_the_parent_budget(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    sub = _agent("researcher").as_tool(tool_name="research", tool_description="Research a topic.")
    parent = _agent("lead", tools=[sub])
    scripted_llm.script(
        Turn(tool_calls=[ToolCall("research", {"input": "topic"})]),  # lead asks the sub-agent
        Turn(tool_calls=[ToolCall("lookup", {"q": "x"})]),  # researcher: 1 call, then refused by the lead's cap
    )
    scripted_llm.default = Turn(text="unexpected")
    result = await Runner.run(parent, "go", context={"otel_budget": otel_budget.Budget(max_steps=2)})
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps"
    (lead_span,) = _spans(otel, "invoke_agent lead")
    (sub_span,) = _spans(otel, "invoke_agent researcher")
    assert sub_span.attributes["stop.reason"] == "steps"  # stopped by the lead's max_steps, not a fresh quota
    assert sub_span.context.trace_id == lead_span.context.trace_id
    assert len(scripted_llm.requests) == 2 == done.usage.model_calls == len(_spans(otel, "chat "))


async def test_delegation_beyond_max_depth_is_refused_and_the_wrap_up_reaches_the_parent(
    scripted_llm: ScriptedLLM, otel  # type: ignore[no-untyped-def]
) -> None:
    sub = _agent("researcher").as_tool(tool_name="research", tool_description="Research a topic.")
    parent = _agent("lead", tools=[sub])
    scripted_llm.script(Turn(tool_calls=[ToolCall("research", {"input": "topic"})]), Turn(text="Did it myself."))
    result = await Runner.run(parent, "go", context={"otel_budget": otel_budget.Budget(max_depth=1)})
    assert result.final_output == "Did it myself."
    assert _spans(otel, "invoke_agent researcher")[0].attributes["stop.reason"] == "depth"
    tool_output = scripted_llm.requests[1].body["input"][-1]["output"]
    assert "max_depth" in str(tool_output)
    assert len(scripted_llm.requests) == 2


async def test_streamed_run_ends_its_event_stream_with_the_wrap_up(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "b"})])
    streamed = Runner.run_streamed(_agent(), "go", context={"otel_budget": otel_budget.Budget(max_steps=1)})
    events = [event async for event in streamed.stream_events()]
    assert events and streamed.is_complete
    assert streamed.final_output.startswith("Stopped at a limit: max_steps")
    done = outcome(streamed)
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 1


async def test_sdk_max_turns_still_raises_and_the_run_ends_steps(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    turns = iter(range(100))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})])
    with pytest.raises(MaxTurnsExceeded):
        await Runner.run(_agent(), "go", max_turns=2)
    span = _spans(otel, "invoke_agent helper")[0]
    assert span.attributes["stop.reason"] == "steps"
    assert span.attributes["otel_budget.stop.limit"] == "max_turns"


# --- the SDK's own trace and logs: a stop is a stop, not a failed model call --------------------------------


class _SdkSpans:
    """A TracingProcessor registered in the SDK: keeps every finished SDK span (type, error)."""

    def __init__(self) -> None:
        self.spans: list = []

    def on_trace_start(self, trace) -> None:  # type: ignore[no-untyped-def]
        pass

    def on_trace_end(self, trace) -> None:  # type: ignore[no-untyped-def]
        pass

    def on_span_start(self, span) -> None:  # type: ignore[no-untyped-def]
        pass

    def on_span_end(self, span) -> None:  # type: ignore[no-untyped-def]
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def of_type(self, kind: str) -> list:
        return [s for s in self.spans if s.span_data.type == kind]

    def errors(self) -> list:
        return [(s.span_data.type, s.error) for s in self.spans if s.error is not None]


@pytest.fixture
def sdk_trace() -> Iterator[_SdkSpans]:
    from agents import set_trace_processors

    recorder = _SdkSpans()
    set_trace_processors([recorder])  # type: ignore[list-item]
    set_tracing_disabled(False)
    yield recorder
    set_tracing_disabled(True)
    set_trace_processors([])


def _sdk_errors(caplog) -> list:  # type: ignore[no-untyped-def]
    return [r for r in caplog.records if r.name.startswith("openai.agents") and r.levelno >= 30]


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_steps_stop_is_no_failed_model_call_in_the_sdks_trace_or_logs(
    scripted_llm: ScriptedLLM, otel, sdk_trace: _SdkSpans, caplog, streamed: bool  # type: ignore[no-untyped-def]
) -> None:
    caplog.set_level("DEBUG", logger="openai.agents")
    turns = iter(range(100))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})])
    budget = otel_budget.Budget(max_steps=2)
    if streamed:
        result = Runner.run_streamed(_agent(), "go", context={"otel_budget": budget})
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(_agent(), "go", context={"otel_budget": budget})
    assert result.final_output.startswith("Stopped at a limit: max_steps")
    assert outcome(result).stop_reason == "steps"
    assert len(scripted_llm.requests) == 2
    assert sdk_trace.errors() == []
    assert len(sdk_trace.of_type("response")) == 2  # one per request sent; none for the refused call
    assert len(sdk_trace.of_type("agent")) == 1
    assert _sdk_errors(caplog) == []


async def test_a_cost_stop_within_the_headroom_is_no_failed_model_call_either(
    scripted_llm: ScriptedLLM, instrument_with, sdk_trace: _SdkSpans, caplog  # type: ignore[no-untyped-def]
) -> None:
    caplog.set_level("DEBUG", logger="openai.agents")
    instrument_with(prices={MODEL: PRICE})
    turns = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})],
                                              output_tokens=300)
    agent = _agent(model_settings=ModelSettings(max_tokens=300))
    result = await Runner.run(agent, "spend", context={"otel_budget": otel_budget.Budget(max_usd=0.05)},
                              max_turns=100)
    done = outcome(result)
    assert done.stop_reason == "cost" and 0 < done.usage.cost_usd <= 0.05
    assert len(scripted_llm.requests) == done.usage.model_calls >= 2
    assert sdk_trace.errors() == []
    assert len(sdk_trace.of_type("response")) == len(scripted_llm.requests)
    assert _sdk_errors(caplog) == []


async def test_a_repeat_stop_is_no_failed_model_call_and_turn_numbers_stay_contiguous(
    scripted_llm: ScriptedLLM, otel, sdk_trace: _SdkSpans, caplog  # type: ignore[no-untyped-def]
) -> None:
    caplog.set_level("DEBUG", logger="openai.agents")
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    result = await Runner.run(_agent(), "loop")
    assert outcome(result).stop_reason == "repeat"
    assert sdk_trace.errors() == [] and _sdk_errors(caplog) == []
    assert len(sdk_trace.of_type("response")) == len(scripted_llm.requests) == 3
    turns = sorted(s.attributes["otel_budget.turn"] for s in _spans(otel, "chat "))
    assert turns == [1, 2, 3]


async def test_budget_hooks_give_the_run_its_budget(scripted_llm: ScriptedLLM, otel) -> None:  # type: ignore[no-untyped-def]
    from otel_budget.agents import BudgetHooks

    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "b"})])
    result = await Runner.run(_agent(), "go", hooks=BudgetHooks(otel_budget.Budget(max_steps=1)))
    assert outcome(result).stop_reason == "steps" and len(scripted_llm.requests) == 1
    streamed = Runner.run_streamed(_agent(), "go", hooks=BudgetHooks(otel_budget.Budget(max_steps=2)))
    async for _ in streamed.stream_events():
        pass
    assert outcome(streamed).stop_reason == "steps" and len(scripted_llm.requests) == 3
    with pytest.raises(TypeError, match="otel_budget.Budget"):
        BudgetHooks({"max_steps": 1})  # type: ignore[arg-type]


async def test_a_stop_with_the_chat_completions_model_is_no_failed_model_call_either(
    scripted_llm: ScriptedLLM, otel, sdk_trace: _SdkSpans, caplog  # type: ignore[no-untyped-def]
) -> None:
    from agents import OpenAIChatCompletionsModel

    caplog.set_level("DEBUG", logger="openai.agents")
    client = AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    agent = Agent(name="helper", instructions="Help.", tools=[lookup],
                  model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
    turns = iter(range(100))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})])
    result = await Runner.run(agent, "go", context={"otel_budget": otel_budget.Budget(max_steps=2)})
    assert outcome(result).stop_reason == "steps" and result.final_output.startswith("Stopped at a limit")
    assert [r.api for r in scripted_llm.requests] == ["openai.chat", "openai.chat"]
    assert sdk_trace.errors() == [] and _sdk_errors(caplog) == []
    assert len(sdk_trace.of_type("generation")) == 2  # the chat model's own span, one per request sent


async def test_a_streamed_chat_completions_run_without_limits_counts_the_reported_usage(
    scripted_llm: ScriptedLLM, otel  # type: ignore[no-untyped-def]
) -> None:
    from agents import OpenAIChatCompletionsModel

    client = AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    agent = Agent(name="helper", instructions="Help.", tools=[],
                  model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client))
    scripted_llm.default = Turn(text="all done here", input_tokens=1_234, output_tokens=56)
    streamed = Runner.run_streamed(agent, "go")  # not the OpenAI API: the SDK does not ask for usage itself
    async for _ in streamed.stream_events():
        pass
    assert streamed.final_output == "all done here"
    assert scripted_llm.requests[0].body["stream_options"] == {"include_usage": True}
    run = outcome(streamed)
    assert (run.usage.input_tokens, run.usage.output_tokens) == (1_234, 56)
