"""Approval pauses inside the OpenAI Agents SDK, for real over loopback to ScriptedLLM: our policy drives the
SDK's own interruptions, and `Runner.run(agent, state)` after approve/reject goes on with the quota used."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget import ApprovalPolicy, Budget, PausedRun  # noqa: E402
from otel_budget.instrumentation.frameworks import openai_agents_state  # noqa: E402
from otel_budget.instrumentation.frameworks.openai_agents import load_state, outcome  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "agents-approval-model"
executed: list[tuple[str, dict[str, Any]]] = []


@function_tool
def read_file(path: str) -> str:
    """Read a file."""
    executed.append(("read_file", {"path": path}))
    return f"contents of {path}"


@function_tool
def git_push(remote: str, branch: str) -> str:
    """Push a branch."""
    executed.append(("git_push", {"remote": remote, "branch": branch}))
    return f"pushed {branch} to {remote}"


@function_tool(needs_approval=True)
def send_email(to: str) -> str:
    """Send an e-mail (the SDK's own approval)."""
    executed.append(("send_email", {"to": to}))
    return f"sent to {to}"


@pytest.fixture(autouse=True)
def sdk(scripted_llm: ScriptedLLM, otel: Any) -> Iterator[None]:
    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0))
    executed.clear()
    yield


def _agent() -> Agent:
    return Agent(name="releaser", model=MODEL, instructions="Release.", tools=[read_file, git_push, send_email])


def _read(path: str) -> Turn:
    return Turn(tool_calls=[ToolCall("read_file", {"path": path})])


def _push(branch: str = "main") -> ToolCall:
    return ToolCall("git_push", {"remote": "origin", "branch": branch})


def _spans(otel: Any, prefix: str) -> list:
    return sorted((s for s in otel.get_finished_spans() if s.name.startswith(prefix)), key=lambda s: s.start_time)


async def _pause_on_push(llm: ScriptedLLM, budget: Budget, reads_before: int = 1) -> Any:
    """Run until the model asks for git_push (in a batch with one more read): the run pauses there."""
    llm.script(*[_read(f"f{i}") for i in range(reads_before)],
               Turn(tool_calls=[ToolCall("read_file", {"path": "VERSION"}), _push()]))
    result = await Runner.run(_agent(), "release", context={"otel_budget": budget})
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval"
    return result


async def test_run_pauses_through_the_sdk_before_a_tool_the_policy_names(scripted_llm: ScriptedLLM, otel: Any) -> None:
    result = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]))
    # The SDK's own pause: an interruption for git_push; the rest of the batch ran, git_push did not.
    assert [item.tool_name for item in result.interruptions] == ["git_push"]
    assert executed == [("read_file", {"path": "f0"}), ("read_file", {"path": "VERSION"})]
    assert result.final_output is None
    paused = outcome(result).paused
    assert paused is not None and paused.pending is not None
    assert (paused.pending.tool, paused.pending.arguments) == ("git_push", {"remote": "origin", "branch": "main"})
    assert paused.pending.call_id == result.interruptions[0].raw_item.call_id
    assert paused.usage.model_calls == 2 == len(scripted_llm.requests)
    assert isinstance(paused.state, dict) and paused.state["context"]["context"]["otel_budget"]["max_steps"] == 6
    (span,) = _spans(otel, "invoke_agent releaser")
    assert span.attributes["stop.reason"] == "awaiting_approval"


async def test_approved_resume_runs_the_call_once_and_keeps_the_consumed_quota(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]), reads_before=3)
    assert outcome(first).usage.model_calls == 4  # paused at 4 of 6 steps
    turns = iter(range(100))
    scripted_llm.responder = lambda req: _read(f"more-{next(turns)}")  # a model that never finishes
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state)
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 6 == done.usage.model_calls  # 2 steps were left, not 6
    assert executed.count(("git_push", {"remote": "origin", "branch": "main"})) == 1
    assert result.final_output.startswith("Stopped at a limit: max_steps")
    paused_span, resumed_span = _spans(otel, "invoke_agent releaser")
    assert resumed_span.context.trace_id == paused_span.context.trace_id
    assert resumed_span.parent.span_id == paused_span.context.span_id
    assert resumed_span.attributes["otel_budget.approval.decision"] == "approved"


async def test_rejected_resume_ends_denied_without_running_the_tool(scripted_llm: ScriptedLLM, otel: Any) -> None:
    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]))
    scripted_llm.default = Turn(text="unexpected")
    state = first.to_state()
    state.reject(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state)
    done = outcome(result)
    assert done is not None and done.stop_reason == "denied"
    assert not any(tool == "git_push" for tool, _ in executed)
    assert len(scripted_llm.requests) == 2  # nothing more was sent after the rejection
    assert "denied" in result.final_output and "NOT complete" in result.final_output
    assert _spans(otel, "invoke_agent releaser")[-1].attributes["stop.reason"] == "denied"


async def test_approval_does_not_cover_the_same_tool_with_changed_arguments(scripted_llm: ScriptedLLM, otel: Any) -> None:
    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]))
    scripted_llm.script(Turn(tool_calls=[_push("force-main")]))
    state = first.to_state()
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state)
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval"  # asks again for the new arguments
    assert done.paused.pending.arguments == {"remote": "origin", "branch": "force-main"}
    assert [item.tool_name for item in result.interruptions] == ["git_push"]
    assert [args for tool, args in executed if tool == "git_push"] == [{"remote": "origin", "branch": "main"}]
    assert done.usage.model_calls == 3


async def test_rejection_tells_the_model_the_policys_alternative_and_the_run_goes_on(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    policy = ApprovalPolicy(tools=["git_push"], alternative="open a pull request instead")
    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=policy))
    scripted_llm.script(Turn(text="Opened a pull request."))
    state = first.to_state()
    state.reject(state.get_interruptions()[0])
    result = await Runner.run(_agent(), state)
    assert result.final_output == "Opened a pull request."
    assert outcome(result).stop_reason == "done"
    told = [item for item in scripted_llm.requests[-1].body["input"] if item.get("type") == "function_call_output"]
    assert "open a pull request instead" in str(told[-1]["output"])
    assert not any(tool == "git_push" for tool, _ in executed)


async def test_the_sdks_own_needs_approval_pauses_and_a_json_round_trip_resumes_with_the_quota(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.script(_read("a"), Turn(tool_calls=[ToolCall("send_email", {"to": "bob"})]))
    result = await Runner.run(_agent(), "mail", context={"otel_budget": Budget(max_steps=3)})
    done = outcome(result)
    assert done is not None and done.stop_reason == "awaiting_approval"
    assert done.paused.pending.tool == "send_email"
    text = done.paused.model_dump_json()  # stored while a person decides
    openai_agents_state._paused.clear()  # as in a new process: only the JSON is left
    state = await load_state(_agent(), PausedRun.model_validate_json(text))
    state.approve(state.get_interruptions()[0])
    scripted_llm.default = _read("b")
    resumed = await Runner.run(_agent(), state)
    again = outcome(resumed)
    assert again is not None and again.stop_reason == "steps"
    assert ("send_email", {"to": "bob"}) in executed
    assert len(scripted_llm.requests) == 3 == again.usage.model_calls  # 1 step left after the pause, not 3
    assert again.trace_id == done.trace_id


async def test_run_without_a_policy_or_interruption_is_unchanged(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[_push()]), Turn(text="Pushed."))
    result = await Runner.run(_agent(), "push", context={"otel_budget": otel_budget.Budget(max_steps=6)})
    assert result.final_output == "Pushed." and outcome(result).stop_reason == "done"
    assert executed == [("git_push", {"remote": "origin", "branch": "main"})]


async def test_streamed_run_pauses_and_a_streamed_resume_goes_on(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[_push()]), Turn(text="Pushed."))
    budget = Budget(max_steps=3, approve=["git_push"])
    streamed = Runner.run_streamed(_agent(), "push", context={"otel_budget": budget})
    async for _ in streamed.stream_events():
        pass
    assert outcome(streamed).stop_reason == "awaiting_approval" and not executed
    state = streamed.to_state()
    state.approve(state.get_interruptions()[0])
    resumed = Runner.run_streamed(_agent(), state)
    async for _ in resumed.stream_events():
        pass
    assert resumed.final_output == "Pushed."
    assert outcome(resumed).stop_reason == "done" and outcome(resumed).usage.model_calls == 2
    assert executed == [("git_push", {"remote": "origin", "branch": "main"})]


async def test_the_readme_budget_survives_the_sdks_to_string_round_trip_and_keeps_the_quota(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    from agents.run_state import RunState

    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]), reads_before=3)
    text = first.to_state().to_string()  # the SDK's documented way to keep a paused run (JSON text)
    openai_agents_state._paused.clear()  # only the text is left, as in another process
    state = await RunState.from_string(_agent(), text)
    state.approve(state.get_interruptions()[0])
    turns = iter(range(100))
    scripted_llm.responder = lambda req: _read(f"more-{next(turns)}")  # a model that never finishes
    result = await Runner.run(_agent(), state)
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 6 == done.usage.model_calls  # 4 before the pause: 2 left, not 6
    assert executed.count(("git_push", {"remote": "origin", "branch": "main"})) == 1
    assert done.trace_id == outcome(first).trace_id


def test_a_new_process_resumes_from_the_sdks_json_with_the_quota_used(scripted_llm: ScriptedLLM, otel: Any,
                                                                       tmp_path: Any) -> None:
    import asyncio
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    first = asyncio.run(_pause_on_push(scripted_llm, Budget(max_steps=5, approve=["git_push"]), reads_before=2))
    state_file = tmp_path / "state.json"
    state_file.write_text(first.to_state().to_string(), encoding="utf-8")
    turns = iter(range(100))
    scripted_llm.responder = lambda req: _read(f"more-{next(turns)}")
    child = Path(__file__).with_name("_agents_resume_child.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([sys.executable, str(child), scripted_llm.openai_base_url, str(state_file), "approve"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["stop_reason"] == "steps"
    assert len(scripted_llm.requests) == 5 == got["model_calls"]  # 3 before the pause, 2 in the new process
    assert got["executed"][0] == "git_push:origin/main"  # the approved call ran once, in the new process
    assert got["executed"].count("git_push:origin/main") == 1
    assert got["trace_id"] == outcome(first).trace_id
    assert got["final_output"].startswith("Stopped at a limit: max_steps")


async def test_a_rejection_read_from_the_sdks_json_ends_the_run_denied(scripted_llm: ScriptedLLM, otel: Any) -> None:
    from agents.run_state import RunState

    first = await _pause_on_push(scripted_llm, Budget(max_steps=6, approve=["git_push"]))
    text = first.to_state().to_string()
    openai_agents_state._paused.clear()
    state = await RunState.from_string(_agent(), text)
    state.reject(state.get_interruptions()[0])
    scripted_llm.default = Turn(text="unexpected")
    result = await Runner.run(_agent(), state)
    assert outcome(result).stop_reason == "denied"
    assert len(scripted_llm.requests) == 2 and not any(tool == "git_push" for tool, _ in executed)


async def test_budget_hooks_pause_and_resume_keep_the_quota(scripted_llm: ScriptedLLM, otel: Any) -> None:
    from agents.run_state import RunState

    from otel_budget.agents import BudgetHooks

    hooks = BudgetHooks(Budget(max_steps=4, approve=["git_push"]))
    scripted_llm.script(_read("a"), Turn(tool_calls=[_push()]))
    first = await Runner.run(_agent(), "release", hooks=hooks)
    assert outcome(first).stop_reason == "awaiting_approval"
    text = first.to_state().to_string()
    openai_agents_state._paused.clear()
    state = await RunState.from_string(_agent(), text)
    state.approve(state.get_interruptions()[0])
    scripted_llm.default = _read("b")
    result = await Runner.run(_agent(), state, hooks=hooks)
    done = outcome(result)
    assert done is not None and done.stop_reason == "steps"
    assert len(scripted_llm.requests) == 4 == done.usage.model_calls
    assert executed.count(("git_push", {"remote": "origin", "branch": "main"})) == 1
