"""An answer cut at the output limit the budget set (cost or token cap, no output limit in the request) ends the
run with that limit, never `error` or `done`: in the OpenAI Agents SDK (which raises ModelBehaviorError on a
truncated Responses answer) and in a hand-written loop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

import otel_budget
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

MODEL = "truncation-model"
PRICE = otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)


@pytest.fixture
def priced(instrument_with: Any) -> Iterator[None]:
    instrument_with(prices={MODEL: PRICE})
    yield


def test_a_final_answer_cut_by_the_cost_cap_ends_the_run_cost_not_done(scripted_llm: ScriptedLLM, priced: None,
                                                                         otel: Any) -> None:
    scripted_llm.script(Turn(text="word " * 2000, output_tokens=2000))
    client = OpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    with otel_budget.run("writer", budget=otel_budget.Budget(max_usd=0.01)) as run:
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "write"}])
    assert reply.choices[0].finish_reason == "length"
    sent_limit = scripted_llm.requests[0].body["max_completion_tokens"]
    assert reply.usage.completion_tokens == sent_limit < 2000
    assert run.outcome.stop_reason == "cost" and run.outcome.limit == "max_usd"
    assert run.outcome.usage.cost_usd <= 0.01
    assert "cut at" in run.outcome.wrap_up and "NOT complete" in run.outcome.wrap_up


def test_an_answer_that_fits_is_not_a_stop(scripted_llm: ScriptedLLM, priced: None, otel: Any) -> None:
    scripted_llm.script(Turn(text="short", output_tokens=5))
    client = OpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    with otel_budget.run("writer", budget=otel_budget.Budget(max_usd=0.01)) as run:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "write"}])
    assert run.outcome.stop_reason == "done"


agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402


@function_tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


async def test_agents_run_whose_answer_the_cost_cap_cut_ends_cost_with_the_wrap_up(
    scripted_llm: ScriptedLLM, priced: None, otel: Any
) -> None:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    turns = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})],
                                              output_tokens=300)
    agent = Agent(name="spender", model=MODEL, instructions="Help.", tools=[lookup])  # no ModelSettings.max_tokens
    result = await Runner.run(agent, "spend", context={"otel_budget": otel_budget.Budget(max_usd=0.05)},
                              max_turns=100)  # the SDK's ModelBehaviorError on the cut answer does not escape
    done = outcome(result)
    assert done is not None and done.stop_reason == "cost" and done.limit == "max_usd"
    assert done.usage.cost_usd <= 0.05
    assert result.final_output.startswith("Stopped at a limit: max_usd")
    last = scripted_llm.requests[-1].body
    assert last["max_output_tokens"] < 300  # the enforcer set the limit that cut the answer
    (span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent spender"]
    assert span.attributes["stop.reason"] == "cost"


@pytest.mark.parametrize("raw", [False, True], ids=["parse", "with_raw_response"])
def test_a_structured_answer_the_sdk_rejects_as_cut_still_counts_and_ends_the_run_cost(
    scripted_llm: ScriptedLLM, priced: None, otel: Any, raw: bool
) -> None:
    """openai's `parse()` raises LengthFinishReasonError on the cut answer: it is counted as reported all the same,
    and the run ends with the limit that cut it."""
    from openai import LengthFinishReasonError
    from pydantic import BaseModel

    class Essay(BaseModel):
        text: str

    scripted_llm.script(Turn(text='{"text": "' + "word " * 2000, output_tokens=2000))
    client = OpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0)
    completions = client.chat.completions.with_raw_response if raw else client.chat.completions
    with otel_budget.run("writer", budget=otel_budget.Budget(max_usd=0.01)) as run, \
            pytest.raises(LengthFinishReasonError) as rejected:
        made = completions.parse(model=MODEL, messages=[{"role": "user", "content": "write"}], response_format=Essay)
        made.parse() if raw else None
    assert rejected.value.completion.usage.completion_tokens == run.outcome.usage.output_tokens > 0
    assert run.outcome.stop_reason == "cost" and run.outcome.limit == "max_usd"
    assert "cut at" in run.outcome.wrap_up
