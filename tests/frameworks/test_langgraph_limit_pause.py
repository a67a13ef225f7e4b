"""A limit pause in a LangGraph graph, for real over loopback to ScriptedLLM: the refused call is not sent and the
run pauses at the limit. With a checkpointer the pause is LangGraph's own `interrupt()` and `Command(resume=...)`
on the thread is the decision (a larger budget comes in that call's config); without one the graph returns with the
wrap-up and `otel_budget.resume(...)` goes on. Either way the quota used is counted and the new cap never passed."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.types import Command  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget import Budget  # noqa: E402
from otel_budget.instrumentation.frameworks.langchain import paused_run  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _graph(llm: ScriptedLLM, name: str, checkpointer: Any = None) -> Any:
    model = ChatOpenAI(model="graph-test-model", base_url=llm.openai_base_url, api_key="x", max_retries=0,
                       max_tokens=300).bind_tools([lookup])

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name=name, checkpointer=checkpointer)


def test_a_steps_limit_pauses_the_graph_and_a_resume_with_more_steps_goes_on(scripted_llm: ScriptedLLM, otel: Any) -> None:
    queries = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(queries))})])
    graph = _graph(scripted_llm, name="pager")
    out = graph.invoke({"messages": [("user", "go")]},
                       {"configurable": {"otel_budget": otel_budget.Budget(max_steps=2, on_limit="pause"),
                                         "thread_id": "lp1"}})
    meta = out["messages"][-1].response_metadata["otel_budget"]
    assert meta["stop_reason"] == "awaiting_approval" and meta["limit"] == "max_steps"
    assert out["messages"][-1].content.startswith("Paused: the run reached max_steps")
    assert len(scripted_llm.requests) == 2
    (span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent pager"]
    assert span.attributes["stop.reason"] == "awaiting_approval"
    paused = paused_run("lp1")
    assert paused is not None and paused.pending is not None and paused.pending.kind == "limit"

    with otel_budget.resume(paused, approved=True, budget=otel_budget.Budget(max_steps=4)) as run:
        graph.invoke({"messages": out["messages"][:-1]})
    assert run.outcome.stop_reason == "awaiting_approval" and run.outcome.limit == "max_steps"
    assert len(scripted_llm.requests) == run.outcome.usage.model_calls == 4


def _pager(llm: ScriptedLLM, lookups: int = 1000) -> None:
    """A model that looks something new up until it did `lookups` times, then answers."""
    def respond(req: Any) -> Turn:
        n = len(llm.requests)
        return Turn(tool_calls=[ToolCall("lookup", {"q": str(n)})]) if n <= lookups else Turn(text="All found.")
    llm.responder = respond


def _cfg(thread: str, budget: Budget | None = None) -> dict:
    configurable: dict[str, Any] = {"thread_id": thread}
    if budget is not None:
        configurable["otel_budget"] = budget
    return {"configurable": configurable}


def _interrupted_at_limit(llm: ScriptedLLM, thread: str, lookups: int = 1000) -> Any:
    _pager(llm, lookups)
    graph = _graph(llm, name="pager", checkpointer=InMemorySaver())
    out = graph.invoke({"messages": [("user", "go")]}, _cfg(thread, Budget(max_steps=2, on_limit="pause")))
    (pause,) = out["__interrupt__"]
    assert pause.value["kind"] == "limit" and pause.value["limit"] == "max_steps"
    assert len(llm.requests) == 2  # the refused call was never sent
    return graph


def test_with_a_checkpointer_a_limit_pause_is_langgraphs_own_interrupt(scripted_llm: ScriptedLLM, otel: Any) -> None:
    graph = _interrupted_at_limit(scripted_llm, "lp-int")
    (pause,) = graph.get_state(_cfg("lp-int")).interrupts
    assert {k: pause.value[k] for k in ("kind", "limit", "used", "cap", "run")} == {
        "kind": "limit", "limit": "max_steps", "used": 2, "cap": 2, "run": "pager"}
    assert graph.get_state(_cfg("lp-int")).next == ("agent",)  # the model call waits, it was not answered
    paused = paused_run("lp-int")
    assert paused is not None and paused.pending.kind == "limit" and paused.pending.cap == 2
    assert paused.usage.model_calls == 2
    (span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent pager"]
    assert span.attributes["stop.reason"] == "awaiting_approval"


def test_resume_with_a_larger_budget_counts_the_quota_used_and_never_passes_it(scripted_llm: ScriptedLLM,
                                                                                otel: Any) -> None:
    graph = _interrupted_at_limit(scripted_llm, "lp-more")
    out = graph.invoke(Command(resume=True), _cfg("lp-more", Budget(max_steps=4, on_limit="pause")))
    (pause,) = out["__interrupt__"]  # paused again, at the new cap
    assert pause.value["used"] == 4 and pause.value["cap"] == 4
    assert len(scripted_llm.requests) == 4  # 2 before the pause, 2 more: never past 4
    again = paused_run("lp-more")
    assert again is not None and again.usage.model_calls == 4

    scripted_llm.responder = lambda req: Turn(text="All found.")
    out = graph.invoke(Command(resume="approve"), _cfg("lp-more", Budget(max_steps=10)))
    assert "__interrupt__" not in out and out["messages"][-1].content == "All found."
    assert len(scripted_llm.requests) == 5
    assert paused_run("lp-more") is None
    spans = sorted((s for s in otel.get_finished_spans() if s.name == "invoke_agent pager"), key=lambda s: s.start_time)
    assert [s.attributes["stop.reason"] for s in spans] == ["awaiting_approval", "awaiting_approval", "done"]
    assert len({s.context.trace_id for s in spans}) == 1  # one trace across the pauses


@pytest.mark.parametrize("budget", [None, Budget(max_steps=10)], ids=["saved-budget", "larger-budget"])
def test_a_rejected_limit_ends_with_its_own_reason_and_the_wrap_up(scripted_llm: ScriptedLLM, otel: Any,
                                                                    budget: Budget | None) -> None:
    graph = _interrupted_at_limit(scripted_llm, "lp-no")
    out = graph.invoke(Command(resume="reject"), _cfg("lp-no", budget))
    assert "__interrupt__" not in out
    last = out["messages"][-1]
    assert last.content.startswith("Stopped at a limit: max_steps")
    assert last.response_metadata["otel_budget"]["stop_reason"] == "steps"
    assert len(scripted_llm.requests) == 2  # nothing more was sent


def test_approved_without_a_larger_budget_pauses_again_without_sending(scripted_llm: ScriptedLLM, otel: Any) -> None:
    graph = _interrupted_at_limit(scripted_llm, "lp-same")
    out = graph.invoke(Command(resume=True), _cfg("lp-same"))
    (pause,) = out["__interrupt__"]
    assert pause.value["limit"] == "max_steps" and pause.value["used"] == 2
    assert len(scripted_llm.requests) == 2
    # A later raise still goes on (the node was asked twice: the first answer is passed over), and the run keeps
    # pausing at limits although this budget does not say so: on_limit="pause" is kept across resumes.
    out = graph.invoke(Command(resume=True), _cfg("lp-same", Budget(max_steps=3)))
    assert len(scripted_llm.requests) == 3
    (pause,) = out["__interrupt__"]
    assert pause.value["used"] == 3 and pause.value["cap"] == 3


async def test_an_async_graph_pauses_by_interrupt_and_resumes_with_more(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _pager(scripted_llm, lookups=3)
    graph = _graph(scripted_llm, name="pager", checkpointer=InMemorySaver())
    out = await graph.ainvoke({"messages": [("user", "go")]}, _cfg("lp-async", Budget(max_steps=2, on_limit="pause")))
    assert out["__interrupt__"][0].value["limit"] == "max_steps" and len(scripted_llm.requests) == 2
    out = await graph.ainvoke(Command(resume={"type": "approve"}), _cfg("lp-async", Budget(max_steps=6)))
    assert out["messages"][-1].content == "All found." and len(scripted_llm.requests) == 4


def test_a_create_agent_with_the_middleware_pauses_by_interrupt(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent

    from otel_budget.langchain import BudgetMiddleware

    _pager(scripted_llm)
    model = ChatOpenAI(model="graph-test-model", base_url=scripted_llm.openai_base_url, api_key="x", max_retries=0,
                       max_tokens=300)
    agent = create_agent(model, [lookup], name="researcher", checkpointer=InMemorySaver(),
                         middleware=[BudgetMiddleware(budget=Budget(max_steps=2, on_limit="pause"))])
    out = agent.invoke({"messages": [("user", "research")]}, _cfg("lp-agent"))
    (pause,) = out["__interrupt__"]
    assert pause.value["limit"] == "max_steps" and pause.value["run"] == "researcher"
    assert len(scripted_llm.requests) == 2
    out = agent.invoke(Command(resume=True), _cfg("lp-agent", Budget(max_steps=5, on_limit="pause")))
    assert out["__interrupt__"][0].value["used"] == 5
    assert len(scripted_llm.requests) == 5  # 2 + 3 more, never past the new cap
    out = agent.invoke(Command(resume=False), _cfg("lp-agent"))
    assert out["messages"][-1].content.startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 5


def test_a_new_process_resumes_the_thread_from_its_checkpoint_and_never_passes_the_new_cap(
    scripted_llm: ScriptedLLM, otel: Any, tmp_path: Any
) -> None:
    import importlib.util
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    child = Path(__file__).with_name("_langgraph_limit_child.py")
    spec = importlib.util.spec_from_file_location("_langgraph_limit_child", child)
    assert spec is not None and spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)

    _pager(scripted_llm)
    saver = helper.file_saver(tmp_path)
    graph = helper.pager_graph(scripted_llm.openai_base_url, saver)
    out = graph.invoke({"messages": [("user", "go")]}, _cfg("lp-proc", Budget(max_steps=3, on_limit="pause")))
    assert out["__interrupt__"][0].value["limit"] == "max_steps" and len(scripted_llm.requests) == 3
    saver.stack.close()  # the checkpoint is in the files now; the new process has nothing else

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

    def resume(value: Any, *max_steps: str) -> dict:
        proc = subprocess.run([sys.executable, str(child), scripted_llm.openai_base_url, str(tmp_path), "lp-proc",
                               json.dumps(value), *max_steps], capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    got = resume(True, "5")
    (pause,) = got["interrupts"]
    assert pause["used"] == 5 and pause["cap"] == 5  # the 3 steps used before counted in the new process
    assert len(scripted_llm.requests) == 5
    got = resume("reject")
    assert got["interrupts"] == [] and got["last"].startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 5
