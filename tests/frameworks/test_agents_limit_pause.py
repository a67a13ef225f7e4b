"""A limit pause under the OpenAI Agents SDK, for real over loopback to ScriptedLLM: the refused call is not sent,
the run pauses at the limit through the SDK's own interruption (`result.interruptions`, `to_state()`,
`state.approve/reject`, `Runner.run(agent, state)`), and a resume with a larger budget goes on with the quota used
counted and never past the new cap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from agents.run_state import RunState  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget import Budget  # noqa: E402
from otel_budget.agents import BudgetHooks  # noqa: E402
from otel_budget.instrumentation.frameworks import openai_agents_state  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents import outcome  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents_state import LIMIT_TOOL  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "agents-test-model"
read: list[int] = []


@function_tool
def next_page(page: int) -> str:
    """Read a page of invoices."""
    read.append(page)
    return f"invoices of page {page}"


@pytest.fixture(autouse=True)
def sdk(scripted_llm: ScriptedLLM, otel: Any) -> Iterator[None]:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    read.clear()
    openai_agents_state._paused.clear()
    yield


def _agent() -> Agent:
    return Agent(name="invoices", model=MODEL, instructions="Read.", tools=[next_page])


def _pager(llm: ScriptedLLM, pages: int = 1000) -> None:
    """A model that asks for the next page until `pages` pages were asked for, then says it is done."""
    def respond(req: Any) -> Turn:
        n = len(llm.requests)
        return Turn(tool_calls=[ToolCall("next_page", {"page": n})]) if n <= pages else Turn(text="All read.")
    llm.responder = respond


def _sent_to_model(llm: ScriptedLLM) -> str:
    return json.dumps([req.body for req in llm.requests])


async def _pause_at_steps(llm: ScriptedLLM, steps: int = 2, pages: int = 1000) -> Any:
    _pager(llm, pages)
    result = await Runner.run(_agent(), "read all pages", context={"otel_budget": Budget(max_steps=steps,
                                                                                          on_limit="pause")})
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval" and done.limit == "max_steps"
    assert len(llm.requests) == steps  # the refused call was never sent
    return result


async def test_a_limit_pause_is_the_sdks_own_interruption(scripted_llm: ScriptedLLM) -> None:
    result = await _pause_at_steps(scripted_llm)
    (item,) = result.interruptions
    assert item.tool_name == LIMIT_TOOL
    assert json.loads(item.raw_item.arguments) == {"limit": "max_steps", "used": 2, "cap": 2}
    assert result.final_output is None  # interrupted, as for a tool approval
    paused = outcome(result).paused
    assert paused.pending.kind == "limit" and paused.pending.limit == "max_steps" and paused.pending.cap == 2
    assert paused.pending.call_id == item.raw_item.call_id
    assert isinstance(paused.state, dict)  # the SDK's RunState JSON
    assert outcome(result).wrap_up.startswith("Paused: the run reached max_steps")
    assert read == [1, 2]
    assert LIMIT_TOOL not in _sent_to_model(scripted_llm)  # the model never sees the limit tool


@pytest.mark.parametrize("how", ["context", "hooks"])
async def test_approve_with_a_larger_budget_goes_on_counting_the_quota_used(scripted_llm: ScriptedLLM,
                                                                            how: str) -> None:
    first = await _pause_at_steps(scripted_llm)
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    larger = Budget(max_steps=4, on_limit="pause")
    given: dict[str, Any] = {"context": {"otel_budget": larger}} if how == "context" else {"hooks": BudgetHooks(larger)}
    result = await Runner.run(_agent(), state, **given)
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval" and done.limit == "max_steps"
    assert len(scripted_llm.requests) == 4 == done.usage.model_calls  # 2 before the pause + 2 more, never past 4
    assert read == [1, 2, 3, 4]
    assert [i.tool_name for i in result.interruptions] == [LIMIT_TOOL]  # paused again at the new cap
    assert done.paused.pending.used == 4 and done.paused.pending.cap == 4
    assert done.trace_id == outcome(first).trace_id
    # The resumed request carries the conversation as it was before the pause, without the limit's items.
    assert LIMIT_TOOL not in _sent_to_model(scripted_llm)
    outputs = [i for i in scripted_llm.requests[2].body["input"] if i.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == ["invoices of page 1", "invoices of page 2"]


async def test_approve_and_the_run_finishes_under_the_larger_cap(scripted_llm: ScriptedLLM, otel: Any) -> None:
    first = await _pause_at_steps(scripted_llm, pages=3)
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state, context={"otel_budget": Budget(max_steps=10)})
    done = outcome(result)
    assert done is not None and done.stop_reason == "done" and result.final_output == "All read."
    assert len(scripted_llm.requests) == 4 == done.usage.model_calls
    assert not any(s.name == f"execute_tool {LIMIT_TOOL}" for s in otel.get_finished_spans())
    assert done.usage.tool_calls == 3  # the pages; the limit's approval is not a tool call of the run


@pytest.mark.parametrize("budget", [None, Budget(max_steps=10)], ids=["saved-budget", "larger-budget"])
async def test_reject_ends_with_the_limits_own_reason_and_the_wrap_up(scripted_llm: ScriptedLLM,
                                                                     budget: Budget | None) -> None:
    first = await _pause_at_steps(scripted_llm)
    state = first.to_state()
    state.reject(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state, context={"otel_budget": budget} if budget else None)
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps" and done.limit == "max_steps"
    assert result.final_output.startswith("Stopped at a limit: max_steps")
    assert "NOT complete" in result.final_output
    assert len(scripted_llm.requests) == 2  # nothing more was sent
    assert not result.interruptions


async def test_approve_without_a_larger_budget_pauses_again_without_sending(scripted_llm: ScriptedLLM) -> None:
    first = await _pause_at_steps(scripted_llm)
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state)  # the saved budget: max_steps=2, all used
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval" and done.limit == "max_steps"
    assert [i.tool_name for i in result.interruptions] == [LIMIT_TOOL]
    assert len(scripted_llm.requests) == 2


async def test_the_pause_survives_the_sdks_to_string_round_trip(scripted_llm: ScriptedLLM) -> None:
    first = await _pause_at_steps(scripted_llm)
    text = first.to_state().to_string()
    openai_agents_state._paused.clear()  # only the text is left, as in another process
    state = await RunState.from_string(_agent(), text)
    (item,) = state.get_interruptions()
    assert item.tool_name == LIMIT_TOOL
    state.approve(item)
    result = await Runner.run(_agent(), state, context={"otel_budget": Budget(max_steps=3, on_limit="pause")})
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval" and done.usage.model_calls == 3
    assert len(scripted_llm.requests) == 3
    assert done.trace_id == outcome(first).trace_id


def test_a_new_process_approves_with_a_larger_cap_and_never_exceeds_it(scripted_llm: ScriptedLLM,
                                                                       tmp_path: Path) -> None:
    import asyncio

    first = asyncio.run(_pause_at_steps(scripted_llm, steps=3))
    state_file = tmp_path / "state.json"
    state_file.write_text(first.to_state().to_string(), encoding="utf-8")
    child = Path(__file__).with_name("_agents_limit_resume_child.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([sys.executable, str(child), scripted_llm.openai_base_url, str(state_file), "approve", "5"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["stop_reason"] == "awaiting_approval" and got["limit"] == "max_steps"
    assert len(scripted_llm.requests) == 5 == got["model_calls"]  # 3 before the pause, 2 in the new process
    assert got["interruptions"] == [LIMIT_TOOL]
    assert got["trace_id"] == outcome(first).trace_id

    state_file.write_text(json.dumps(got["state"]), encoding="utf-8")  # paused again: a person declines now
    proc = subprocess.run([sys.executable, str(child), scripted_llm.openai_base_url, str(state_file), "reject"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["stop_reason"] == "steps" and got["final_output"].startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 5


async def test_a_streamed_run_pauses_at_the_limit_and_a_streamed_resume_goes_on(scripted_llm: ScriptedLLM) -> None:
    _pager(scripted_llm, pages=2)
    streamed = Runner.run_streamed(_agent(), "read", context={"otel_budget": Budget(max_steps=2, on_limit="pause")})
    async for _ in streamed.stream_events():
        pass
    assert outcome(streamed).stop_reason == "awaiting_approval"
    assert [i.tool_name for i in streamed.interruptions] == [LIMIT_TOOL]
    state = streamed.to_state()
    state.approve(state.get_interruptions()[0])
    resumed = Runner.run_streamed(_agent(), state, context={"otel_budget": Budget(max_steps=5)})
    async for _ in resumed.stream_events():
        pass
    assert resumed.final_output == "All read."
    assert outcome(resumed).stop_reason == "done" and outcome(resumed).usage.model_calls == 3
    assert len(scripted_llm.requests) == 3


async def test_running_the_agent_again_inside_resume_keeps_working(scripted_llm: ScriptedLLM) -> None:
    """The other way to go on: the agent run again inside `otel_budget.resume(...)` with its conversation."""
    result = await _pause_at_steps(scripted_llm)
    first = outcome(result)
    with otel_budget.resume(first.paused.model_dump_json(), approved=True, budget=Budget(max_steps=4)) as run:
        await Runner.run(_agent(), result.to_input_list(), max_turns=100)
    assert run.outcome.stop_reason == "awaiting_approval" and run.outcome.limit == "max_steps"
    assert len(scripted_llm.requests) == run.outcome.usage.model_calls == 4
    assert LIMIT_TOOL not in _sent_to_model(scripted_llm)  # the limit's call in the conversation is not sent


async def test_a_cost_pause_resumed_with_a_larger_cap_never_spends_past_it(scripted_llm: ScriptedLLM,
                                                                          instrument_with: Any) -> None:
    from agents import ModelSettings

    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=100.0, output_per_mtok=1000.0)})
    n = iter(range(1, 1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("next_page", {"page": next(n)})],
                                              input_tokens=100, output_tokens=100)  # about $0.11 a call
    agent = Agent(name="invoices", model=MODEL, instructions="Read.", tools=[next_page],
                  model_settings=ModelSettings(max_tokens=100))
    result = await Runner.run(agent, "read", context={"otel_budget": Budget(max_usd=0.40, on_limit="pause")},
                              max_turns=100)
    first = outcome(result)
    assert first is not None and first.stop_reason == "awaiting_approval" and first.limit == "max_usd"
    assert [i.tool_name for i in result.interruptions] == [LIMIT_TOOL]
    assert first.usage.cost_usd <= 0.40 and len(scripted_llm.requests) == first.usage.model_calls
    state = result.to_state()
    state.approve(state.get_interruptions()[0])
    resumed = await Runner.run(agent, state, context={"otel_budget": Budget(max_usd=1.00, on_limit="pause")})
    done = outcome(resumed)
    assert done is not None and done.stop_reason == "awaiting_approval" and done.limit == "max_usd"
    assert len(scripted_llm.requests) == done.usage.model_calls > first.usage.model_calls
    assert first.usage.cost_usd < done.usage.cost_usd <= 1.00  # the $ spent before counted: never past the cap
    assert done.usage.model_calls <= 9  # $1.00 pays 9 calls in all; a fresh quota would have sent 3 + 9
    assert done.paused.pending.cap == 1.00
