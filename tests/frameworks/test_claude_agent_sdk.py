"""Claude Agent SDK driving the real Claude Code CLI (bundled with the SDK) against ScriptedLLM on loopback."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

sdk = pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (  # noqa: E402
    AgentDefinition,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    ResultMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

import otel_budget  # noqa: E402
from otel_budget.instrumentation.frameworks.claude_agent_sdk import outcome  # noqa: E402
from otel_budget.testing import RecordedRequest, ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "claude-sonnet-4-5"
LOOKUP = "mcp__docs__lookup"
executed: list[dict[str, Any]] = []


@tool("lookup", "Look something up", {"q": str})
async def lookup(args: dict[str, Any]) -> dict[str, Any]:
    executed.append(args)
    return {"content": [{"type": "text", "text": "nothing yet"}]}


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    executed.clear()
    yield
    executed.clear()


def options(llm: ScriptedLLM, home: Path, **kwargs: Any) -> ClaudeAgentOptions:
    """The CLI offline: its API at ScriptedLLM, a clean HOME, no non-essential traffic, no settings files."""
    env = {
        "ANTHROPIC_BASE_URL": llm.anthropic_base_url, "ANTHROPIC_API_KEY": "test", "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
    }
    return ClaudeAgentOptions(
        mcp_servers={"docs": create_sdk_mcp_server("docs", tools=[lookup])},
        allowed_tools=[LOOKUP, "Agent", "Task"], model=MODEL, env=env, cwd=str(home), **{"setting_sources": [], **kwargs},
    )


def collect(prompt: str, opts: ClaudeAgentOptions) -> list[Any]:
    async def go() -> list[Any]:
        return [message async for message in query(prompt=prompt, options=opts)]

    return anyio.run(go)


def main_thread(request: RecordedRequest) -> bool:
    """The main agent's requests offer the Agent tool; a subagent's do not."""
    return any(t.get("name") == "Agent" for t in request.body.get("tools", []))


def _spans(otel: Any, prefix: str) -> list[Any]:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def test_healthy_query_is_a_done_run_with_one_chat_span_per_request(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})], input_tokens=100, output_tokens=10),
        Turn(text="Found it.", input_tokens=120, output_tokens=5),
    )
    messages = collect("find it", options(scripted_llm, tmp_path))
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.result == "Found it." and not result.is_error
    assert not any(type(m).__name__ == "StreamEvent" for m in messages)  # the events we asked for stay hidden
    done = outcome(result)
    assert done is not None and done.stop_reason == "done"
    assert done.usage.model_calls == len(scripted_llm.requests) == 2
    assert (done.usage.input_tokens, done.usage.output_tokens) == (220, 15)
    assert done.usage.tool_calls == 1 and executed == [{"q": "a"}]
    assert done.usage.cost_usd == pytest.approx(result.total_cost_usd)  # the CLI's own figure, not doubled
    (run_span,) = _spans(otel, "invoke_agent")
    chats = _spans(otel, "chat ")
    assert [s.name for s in chats] == [f"chat {MODEL}"] * 2
    assert all(s.parent.span_id == run_span.context.span_id for s in chats)
    assert run_span.attributes["stop.reason"] == "done"


def test_the_clis_own_cost_is_charged_once_when_our_prices_differ(
    scripted_llm: ScriptedLLM, instrument_with: Any, tmp_path: Path
) -> None:
    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=1.0, output_per_mtok=5.0)})  # the CLI: 3 / 15
    scripted_llm.script(
        Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})], input_tokens=1000, output_tokens=100),
        Turn(text="Found it.", input_tokens=1200, output_tokens=50),
    )
    messages = collect("find it", options(scripted_llm, tmp_path))
    result = messages[-1]
    done = outcome(result)
    assert done is not None and done.stop_reason == "done"
    assert result.total_cost_usd == pytest.approx((2200 * 3.0 + 150 * 15.0) / 1e6)
    assert done.usage.cost_usd == pytest.approx(result.total_cost_usd)  # ours + the CLI's excess, once


def test_stuck_query_is_stopped_by_repeat_before_the_next_call(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall(LOOKUP, {"q": "same"})], input_tokens=100, output_tokens=10)
    opts = options(scripted_llm, tmp_path)
    opts.otel_budget = otel_budget.Budget(max_repeats=3)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    result = messages[-1]
    done = outcome(result)
    assert done is not None and done.stop_reason == "repeat"
    assert len(scripted_llm.requests) == 3 == done.usage.model_calls
    assert len(executed) == 2  # the third identical request was denied
    assert result.is_error and result.result.startswith("Stopped at a limit: max_repeats")
    (run_span,) = _spans(otel, "invoke_agent")
    assert run_span.attributes["stop.reason"] == "repeat"


def test_tool_cap_denies_the_tool_and_the_next_call_is_not_sent(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall(LOOKUP, {"q": f"page {next(counter)}"})], input_tokens=100, output_tokens=10
    )
    opts = options(scripted_llm, tmp_path)
    opts.otel_budget = otel_budget.Budget(max_tool_calls=2)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "tool_calls" and done.limit == "max_tool_calls"
    assert len(scripted_llm.requests) == 3 == done.usage.model_calls
    assert executed == [{"q": "page 0"}, {"q": "page 1"}]  # the third requested tool was denied
    assert messages[-1].is_error and messages[-1].result.startswith("Stopped at a limit: max_tool_calls")


def test_runaway_query_is_stopped_by_cost_without_overshoot(
    scripted_llm: ScriptedLLM, instrument_with: Any, tmp_path: Path
) -> None:
    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=3.0, output_per_mtok=15.0)})
    counter = iter(range(1000))
    # Input tokens as the server counts them from the request body (Claude Code's requests are large).
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall(LOOKUP, {"q": f"page {next(counter)}"})], output_tokens=100
    )
    opts = options(scripted_llm, tmp_path)
    opts.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = "2000"
    # The same answer to every page would stop it as a stall (max_stalls) first: only the money cap is tested here.
    opts.otel_budget = otel_budget.Budget(max_usd=0.40, max_stalls=None)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "cost" and done.limit == "max_usd"
    assert done.usage.cost_usd <= 0.40
    assert done.usage.model_calls == len(scripted_llm.requests) > 3
    assert all(r.body["max_tokens"] <= 2000 for r in scripted_llm.requests)
    # It stopped because the next call's worst case did not fit: the next request is at least as large as the
    # last one sent, and may use its 2000 output tokens.
    last_input = len(json.dumps(scripted_llm.requests[-1].body)) / 4
    assert done.usage.cost_usd + (last_input * 3.0 + 2000 * 15.0) / 1e6 > 0.40
    assert messages[-1].is_error and messages[-1].result.startswith("Stopped at a limit: max_usd")


READ = "mcp__docs__read_page"
PAGES = ["A", "A", "B", "A", "A", "B", "A"]  # the same answer twice at most in a row, never three times


@tool("read_page", "Read one page of invoices", {"page": int})
async def read_page(args: dict[str, Any]) -> dict[str, Any]:
    executed.append(args)
    return {"content": [{"type": "text", "text": f"invoices {PAGES[args['page']]}"}]}


@pytest.mark.parametrize("max_usd", [None, 5.0], ids=["steps-cap", "money-cap"])
def test_a_stuck_portal_is_stopped_by_stalled_before_the_fourth_call(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path, max_usd: float | None
) -> None:
    """The tool_result blocks the CLI sends back feed the stall check: the same answer to changing pages. Under a
    money cap the CLI appends its budget reminders (`USD budget: $x/$y`), which change every turn, to each result."""
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall(LOOKUP, {"q": f"page {next(counter)}"})], input_tokens=100, output_tokens=10
    )
    opts = options(scripted_llm, tmp_path)
    opts.otel_budget = otel_budget.Budget(max_steps=8, max_usd=max_usd)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "stalled" and done.limit == "max_stalls"
    assert len(scripted_llm.requests) == 3 == done.usage.model_calls  # the 4th call was never sent
    assert len(executed) == 3  # three unchanged results were read from the requests that carried them
    assert done.detail.startswith(f"{LOOKUP} returned the same result 3 times in a row")
    assert messages[-1].is_error and messages[-1].result.startswith("Stopped: no progress (max_stalls).")
    reminded = "USD budget:" in json.dumps(scripted_llm.requests[-1].body["messages"][-1])
    assert reminded is (max_usd is not None)  # the money cap's variant does carry the CLI's changing reminders
    (run_span,) = _spans(otel, "invoke_agent")
    assert run_span.attributes["stop.reason"] == "stalled"


def test_the_same_results_not_in_a_row_never_stall(scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path) -> None:
    turns = [Turn(tool_calls=[ToolCall(READ, {"page": n})], input_tokens=100, output_tokens=10)
             for n in range(len(PAGES))]
    scripted_llm.script(*turns, Turn(text="All pages read.", input_tokens=100, output_tokens=5))
    opts = options(scripted_llm, tmp_path)
    opts.mcp_servers = {"docs": create_sdk_mcp_server("docs", tools=[lookup, read_page])}
    opts.allowed_tools = [*opts.allowed_tools, READ]
    messages = collect("read every page", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "done", done.detail
    assert len(scripted_llm.requests) == len(PAGES) + 1 == done.usage.model_calls
    assert len(executed) == len(PAGES)
    assert messages[-1].result == "All pages read."


def test_subagent_draws_from_the_parent_budget(scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path) -> None:
    main = [
        Turn(tool_calls=[ToolCall("Agent", {"description": "look", "prompt": "look it up", "subagent_type": "helper",
                                            "run_in_background": False})], input_tokens=100, output_tokens=10),
        Turn(text="All done.", input_tokens=150, output_tokens=5),
    ]
    sub = [
        Turn(tool_calls=[ToolCall(LOOKUP, {"q": "sub"})], input_tokens=50, output_tokens=5),
        Turn(text="sub done", input_tokens=60, output_tokens=7),
    ]
    scripted_llm.responder = lambda request: (main if main_thread(request) else sub).pop(0)
    opts = options(scripted_llm, tmp_path, agents={
        "helper": AgentDefinition(description="helper", prompt="You help.", tools=[LOOKUP])})
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "done"
    assert executed == [{"q": "sub"}]  # the subagent's tool ran, through our gate
    assert done.usage.tool_calls == 2  # the delegation and the subagent's lookup, in one tree
    assert done.usage.cost_usd == pytest.approx(messages[-1].total_cost_usd)
    assert len(scripted_llm.requests) == 4


WRITER = {"writer": AgentDefinition(description="writer", prompt="You write.", tools=[LOOKUP])}


def delegate(background: bool) -> Turn:
    """The main agent's call that starts the writer subagent (in the background, the CLI's default, or not)."""
    args: dict[str, Any] = {"description": "write", "prompt": "write it", "subagent_type": "writer"}
    if not background:
        args["run_in_background"] = False
    return Turn(tool_calls=[ToolCall("Agent", args)], input_tokens=100, output_tokens=10)


def by_agent(main: list[Turn], sub: list[Turn]) -> Any:
    """A responder: the main agent's and the subagent's requests each get their own script, in order."""
    return lambda request: (main if main_thread(request) else sub).pop(0)


def served_in_order(otel: Any, llm: ScriptedLLM) -> None:
    """Every request that reached the server was admitted: one chat span each, turns 1..n with none skipped."""
    chats = _spans(otel, "chat ")
    assert len(chats) == len(llm.requests)
    assert sorted(s.attributes["otel_budget.turn"] for s in chats) == list(range(1, len(llm.requests) + 1))


@pytest.mark.parametrize("background", [True, False], ids=["background", "foreground"])
def test_no_request_leaves_without_an_admission_with_a_subagent(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path, background: bool
) -> None:
    main = [delegate(background), *[Turn(text="main done", input_tokens=100, output_tokens=5)] * 3]
    sub = [Turn(tool_calls=[ToolCall(LOOKUP, {"q": "x"})], input_tokens=50, output_tokens=5),
           *[Turn(text="sub done", input_tokens=60, output_tokens=5)] * 3]
    scripted_llm.responder = by_agent(main, sub)
    opts = options(scripted_llm, tmp_path, agents=WRITER)
    opts.otel_budget = otel_budget.Budget(max_steps=2)  # type: ignore[attr-defined]
    messages = collect("go", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 2 == done.usage.model_calls  # was 3: a call no hook admitted went out
    served_in_order(otel, scripted_llm)
    assert messages[-1].is_error and messages[-1].result.startswith("Stopped at a limit: max_steps")
    (writer,) = _spans(otel, "invoke_agent writer")  # the subagent's own run, ended by its refused call
    assert writer.attributes["stop.reason"] == "steps"
    (run_span,) = [s for s in _spans(otel, "invoke_agent") if s.name == "invoke_agent claude-agent"]
    assert writer.parent.span_id == run_span.context.span_id
    for span in _spans(otel, "chat "):
        assert span.parent.span_id in (run_span.context.span_id, writer.context.span_id)


def test_a_refused_subagent_call_ends_the_subagent_with_the_wrap_up_and_the_parent_goes_on(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    main = [delegate(False), Turn(text="The writer was stopped.", input_tokens=150, output_tokens=5)]
    sub = [Turn(tool_calls=[ToolCall(LOOKUP, {"q": "same"})], input_tokens=50, output_tokens=5)] * 5
    scripted_llm.responder = by_agent(main, list(sub))
    opts = options(scripted_llm, tmp_path, agents=WRITER)
    opts.otel_budget = otel_budget.Budget(max_steps=20)  # type: ignore[attr-defined]
    messages = collect("go", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "done"  # the parent's own budget never stopped it
    assert messages[-1].result == "The writer was stopped."
    # The writer asked three times for the same lookup: the third was not run, its next call was not sent.
    assert [main_thread(r) for r in scripted_llm.requests] == [True, False, False, False, True]
    assert executed == [{"q": "same"}] * 2
    served_in_order(otel, scripted_llm)
    (writer,) = _spans(otel, "invoke_agent writer")
    assert writer.attributes["stop.reason"] == "repeat"
    writer_chats = [s for s in _spans(otel, "chat ") if s.parent.span_id == writer.context.span_id]
    assert len(writer_chats) == 3
    # The parent got the subagent's wrap-up as the result of its Agent tool call.
    handed_back = json.dumps(scripted_llm.requests[-1].body["messages"][-1])
    assert "Stopped at a limit: max_repeats" in handed_back


def test_max_seconds_bounds_a_call_in_flight(scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})], input_tokens=100, output_tokens=10),
        Turn(text="too late", input_tokens=100, output_tokens=5, delay=60.0),
    )
    opts = options(scripted_llm, tmp_path)
    opts.otel_budget = otel_budget.Budget(max_seconds=10)  # type: ignore[attr-defined]
    started = time.monotonic()
    messages = collect("find it", opts)
    elapsed = time.monotonic() - started
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "time" and done.limit == "max_seconds"
    assert elapsed < 10 + 15  # the deadline plus the CLI's start and shutdown, far below the 60 s answer
    assert len(scripted_llm.requests) == 2  # the slow call was cut, no retry was sent
    assert messages[-1].is_error and messages[-1].result.startswith("Stopped at a limit: max_seconds")


def test_a_settings_file_cannot_route_the_cli_around_the_gate(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": scripted_llm.anthropic_base_url}}))
    scripted_llm.script(Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})], input_tokens=100, output_tokens=10),
                        Turn(text="done", input_tokens=100, output_tokens=10))
    opts = options(scripted_llm, tmp_path, setting_sources=["user"])
    opts.otel_budget = otel_budget.Budget(max_steps=1)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 1 == done.usage.model_calls


def test_budgeted_options_carry_the_budget_as_a_typed_field(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    from otel_budget.claude import BudgetedOptions
    from otel_budget.claude import outcome as typed_outcome

    scripted_llm.default = Turn(tool_calls=[ToolCall(LOOKUP, {"q": "same"})], input_tokens=100, output_tokens=10)
    plain = options(scripted_llm, tmp_path)
    opts = BudgetedOptions(**{f.name: getattr(plain, f.name) for f in dataclasses.fields(plain)},
                           otel_budget=otel_budget.Budget(max_steps=2))
    messages = collect("find it", opts)
    done = typed_outcome(messages[-1])
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 2
    with pytest.raises(TypeError, match="takes an otel_budget.Budget"):
        BudgetedOptions(otel_budget={"max_steps": 2})  # type: ignore[arg-type]


def test_delegation_beyond_max_depth_is_refused_and_the_parent_goes_on(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path
) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall("Agent", {"description": "look", "prompt": "look it up", "subagent_type": "helper",
                                            "run_in_background": False})], input_tokens=100, output_tokens=10),
        Turn(text="I could not delegate.", input_tokens=150, output_tokens=5),
    )
    opts = options(scripted_llm, tmp_path, agents={
        "helper": AgentDefinition(description="helper", prompt="You help.", tools=[LOOKUP])})
    opts.otel_budget = otel_budget.Budget(max_depth=1)  # type: ignore[attr-defined]
    messages = collect("find it", opts)
    done = outcome(messages[-1])
    assert done is not None and done.stop_reason == "done"
    assert messages[-1].result == "I could not delegate."
    assert all(main_thread(r) for r in scripted_llm.requests)  # no subagent call was sent
    refusal = json.dumps(scripted_llm.requests[1].body["messages"][-1])
    assert "max_depth" in refusal
    (child,) = _spans(otel, "invoke_agent helper")
    assert child.attributes["stop.reason"] == "depth"


def test_client_session_is_one_run_across_prompts(scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=100, output_tokens=5)
    opts = options(scripted_llm, tmp_path)
    opts.otel_budget = otel_budget.Budget(max_steps=2)  # type: ignore[attr-defined]
    seen: list[Any] = []

    async def go() -> ClaudeSDKClient:
        client = ClaudeSDKClient(options=opts)
        async with client:
            for prompt in ("one", "two", "three"):
                await client.query(prompt)
                seen.extend([m async for m in client.receive_response()])
        return client

    client = anyio.run(go)
    done = outcome(client)
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 2 == done.usage.model_calls
    results = [m for m in seen if isinstance(m, ResultMessage)]
    assert results[-1].is_error and "max_steps" in results[-1].result


def test_user_hooks_still_run(scripted_llm: ScriptedLLM, otel: Any, tmp_path: Path) -> None:
    calls: list[str] = []

    async def mine(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        calls.append(data["tool_name"])
        return {}

    scripted_llm.script(Turn(tool_calls=[ToolCall(LOOKUP, {"q": "a"})]), Turn(text="ok"))
    collect("go", options(scripted_llm, tmp_path, hooks={"PreToolUse": [HookMatcher(hooks=[mine])]}))
    assert calls == [LOOKUP]
