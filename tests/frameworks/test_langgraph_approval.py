"""Approval pauses in LangGraph, for real over loopback to ScriptedLLM: a graph that calls `interrupt()` before a
risky tool pauses our run, and `Command(resume=...)` on the same thread goes on with the quota used."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from otel_budget import Budget  # noqa: E402
from otel_budget.instrumentation.frameworks.langchain import paused_run  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "graph-approval-model"
executed: list[tuple[str, dict[str, Any]]] = []


@tool
def read_file(path: str) -> str:
    """Read a file."""
    executed.append(("read_file", {"path": path}))
    return f"contents of {path}"


@tool
def git_push(remote: str, branch: str) -> str:
    """Push a branch."""
    executed.append(("git_push", {"remote": remote, "branch": branch}))
    return f"pushed {branch} to {remote}"


@tool
def ask_human(question: str) -> str:
    """Ask a person."""
    executed.append(("ask_human", {"question": question}))
    return str(interrupt(question))


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


def _graph(llm: ScriptedLLM, tools: list | None = None) -> Any:
    """A tool-calling agent whose git_push calls go through a person first (`interrupt()` in `review`)."""
    tools = tools or [read_file, git_push]
    bound = ChatOpenAI(model=MODEL, base_url=llm.openai_base_url, api_key="x", max_retries=0,
                       max_tokens=300).bind_tools(tools)

    def agent(state: MessagesState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        calls = getattr(state["messages"][-1], "tool_calls", None) or []
        if any(c["name"] == "git_push" for c in calls):
            return "review"
        return "tools" if calls else END

    def review(state: MessagesState) -> Command:
        call = next(c for c in state["messages"][-1].tool_calls if c["name"] == "git_push")
        decision = interrupt({"tool": call["name"], "arguments": call["args"]})
        if decision == "approve":
            return Command(goto="tools")
        return Command(goto="agent", update={"messages": [
            ToolMessage(content="A person rejected the push.", tool_call_id=c["id"])
            for c in state["messages"][-1].tool_calls
        ]})

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("review", review, destinations=("tools", "agent"))
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["review", "tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(name="releaser", checkpointer=InMemorySaver())


def _cfg(thread: str, budget: Budget) -> dict:
    return {"configurable": {"thread_id": thread, "otel_budget": budget}}


def _reasons(otel: Any) -> list[str]:
    spans = sorted((s for s in otel.get_finished_spans() if s.name == "invoke_agent releaser"),
                   key=lambda s: s.start_time)
    return [s.attributes["stop.reason"] for s in spans]


def _read(path: str) -> Turn:
    return Turn(tool_calls=[ToolCall("read_file", {"path": path})])


def _push(branch: str = "main") -> Turn:
    return Turn(tool_calls=[ToolCall("git_push", {"remote": "origin", "branch": branch})])


def _pause_on_push(llm: ScriptedLLM, thread: str, budget: Budget, reads_before: int = 1) -> Any:
    llm.script(*[_read(f"f{i}") for i in range(reads_before)], _push())
    graph = _graph(llm)
    out = graph.invoke({"messages": [("user", "release")]}, _cfg(thread, budget))
    assert "__interrupt__" in out
    return graph


def test_interrupt_before_a_gated_tool_pauses_the_run(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _pause_on_push(scripted_llm, "t-pause", Budget(max_steps=6, approve=["git_push"]))
    assert _reasons(otel) == ["awaiting_approval"]  # not "done"
    assert executed == [("read_file", {"path": "f0"})]
    paused = paused_run("t-pause")
    assert paused is not None and paused.pending is not None
    assert (paused.pending.tool, paused.pending.arguments) == ("git_push", {"remote": "origin", "branch": "main"})
    assert paused.pending.call_id is not None  # the model's tool call id
    assert paused.usage.model_calls == 2 == len(scripted_llm.requests)


def test_approved_resume_runs_the_call_once_and_keeps_the_consumed_quota(scripted_llm: ScriptedLLM, otel: Any) -> None:
    cfg = _cfg("t-approve", Budget(max_steps=6, approve=["git_push"]))
    graph = _pause_on_push(scripted_llm, "t-approve", cfg["configurable"]["otel_budget"], reads_before=3)
    assert paused_run("t-approve").usage.model_calls == 4  # paused at 4 of 6 steps
    turns = iter(range(100))
    scripted_llm.responder = lambda req: _read(f"more-{next(turns)}")
    out = graph.invoke(Command(resume="approve"), cfg)
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"
    assert len(scripted_llm.requests) == 6  # 2 steps were left after the pause, not 6
    assert executed.count(("git_push", {"remote": "origin", "branch": "main"})) == 1
    assert _reasons(otel) == ["awaiting_approval", "steps"]
    paused_span, resumed_span = sorted((s for s in otel.get_finished_spans() if s.name == "invoke_agent releaser"),
                                       key=lambda s: s.start_time)
    assert resumed_span.parent.span_id == paused_span.context.span_id
    assert resumed_span.attributes["otel_budget.approval.decision"] == "approved"
    assert resumed_span.attributes["otel_budget.used.steps"] == 6


def test_rejected_resume_ends_denied_without_running_the_tool(scripted_llm: ScriptedLLM, otel: Any) -> None:
    cfg = _cfg("t-reject", Budget(max_steps=6, approve=["git_push"]))
    graph = _pause_on_push(scripted_llm, "t-reject", cfg["configurable"]["otel_budget"])
    scripted_llm.default = Turn(text="unexpected")
    out = graph.invoke(Command(resume="reject"), cfg)
    last = out["messages"][-1]
    assert last.response_metadata["otel_budget"]["stop_reason"] == "denied"
    assert "denied" in last.content and "NOT complete" in last.content
    assert not any(name == "git_push" for name, _ in executed)
    assert len(scripted_llm.requests) == 2  # nothing was sent after the rejection
    assert _reasons(otel) == ["awaiting_approval", "denied"]


def test_approval_does_not_cover_the_same_tool_with_changed_arguments(scripted_llm: ScriptedLLM, otel: Any) -> None:
    cfg = _cfg("t-changed", Budget(max_steps=6, approve=["git_push"]))
    graph = _pause_on_push(scripted_llm, "t-changed", cfg["configurable"]["otel_budget"])
    scripted_llm.script(_push("force-main"))
    out = graph.invoke(Command(resume="approve"), cfg)
    assert "__interrupt__" in out  # the new arguments need a new approval
    assert _reasons(otel) == ["awaiting_approval", "awaiting_approval"]
    assert paused_run("t-changed").pending.arguments == {"remote": "origin", "branch": "force-main"}
    assert [args for name, args in executed if name == "git_push"] == [{"remote": "origin", "branch": "main"}]


def test_a_tool_that_interrupts_pauses_on_itself_and_is_counted_once(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[ToolCall("ask_human", {"question": "ok?"})]), Turn(text="Thanks."))
    graph = _graph(scripted_llm, tools=[ask_human])
    cfg = _cfg("t-ask", Budget(max_steps=6, max_tool_calls=1))
    assert "__interrupt__" in graph.invoke({"messages": [("user", "go")]}, cfg)
    paused = paused_run("t-ask")
    assert paused is not None and paused.pending.tool == "ask_human"
    assert paused.pending.arguments == {"question": "ok?"}
    out = graph.invoke(Command(resume="yes"), cfg)
    assert out["messages"][-1].content == "Thanks."
    assert len(executed) == 2  # LangGraph runs the tool again on resume...
    resumed = max((s for s in otel.get_finished_spans() if s.name == "invoke_agent releaser"), key=lambda s: s.start_time)
    assert resumed.attributes["stop.reason"] == "done"
    assert resumed.attributes["otel_budget.used.tool_calls"] == 1  # ...but it is one tool call, within max 1
