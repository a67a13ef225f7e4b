"""LangChain v1 `create_agent` with `otel_budget.langchain.BudgetMiddleware`, for real over loopback to ScriptedLLM
(langchain-openai, chat completions via the openai SDK)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("langchain.agents")
pytest.importorskip("langchain_openai")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import ModelCallLimitMiddleware  # noqa: E402
from langchain.agents.structured_output import ProviderStrategy, ToolStrategy  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.langchain import BudgetMiddleware  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "agent-test-model"
executed: list[str] = []


@tool
def lookup(q: str) -> str:
    """Look something up."""
    executed.append(q)
    return f"found {q}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


def _agent(llm: ScriptedLLM, *middleware: Any, name: str = "researcher", tools: list | None = None) -> Any:
    model = ChatOpenAI(model=MODEL, base_url=llm.openai_base_url, api_key="x", max_retries=0, max_tokens=300)
    return create_agent(model, [lookup] if tools is None else tools, middleware=list(middleware), name=name)


def _fresh_lookups(llm: ScriptedLLM) -> None:
    turns = iter(range(1000))
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})])


def _run_span(otel: Any, name: str = "researcher") -> Any:
    (span,) = [s for s in otel.get_finished_spans() if s.name == f"invoke_agent {name}"]
    return span


def test_middleware_budget_ends_the_agent_with_the_wrap_up_before_the_next_model_call(scripted_llm: ScriptedLLM,
                                                                                       otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=2)))
    out = agent.invoke({"messages": [("user", "research")]})
    assert len(scripted_llm.requests) == 2 and executed == ["0", "1"]
    last = out["messages"][-1]
    assert last.type == "ai" and not last.tool_calls
    assert last.content.startswith("Stopped at a limit: max_steps (2 of 2")
    assert last.response_metadata["otel_budget"] == {"stop_reason": "steps", "limit": "max_steps",
                                                     "run_name": "researcher"}
    span = _run_span(otel)
    assert span.attributes["stop.reason"] == "steps" and span.attributes["otel_budget.limit.steps"] == 2
    assert span.attributes["otel_budget.used.steps"] == 2
    chats = [s for s in otel.get_finished_spans() if s.name.startswith("chat ")]
    tools = [s for s in otel.get_finished_spans() if s.name == "execute_tool lookup"]
    assert len(chats) == 2 and len(tools) == 2  # no span for a call that was never made
    assert all(s.parent.span_id == span.context.span_id for s in chats + tools)


def test_a_repeat_stop_ends_the_agent_at_the_next_model_call(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})])
    out = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=10))).invoke(
        {"messages": [("user", "loop")]})
    assert len(scripted_llm.requests) == 3 and executed == ["same", "same"]
    last = out["messages"][-1]
    assert last.content.startswith("Stopped at a limit: max_repeats")
    assert last.response_metadata["otel_budget"]["stop_reason"] == "repeat"
    assert _run_span(otel).attributes["stop.reason"] == "repeat"


def test_a_call_refused_by_the_cost_cap_is_not_sent_and_the_agent_ends_with_the_wrap_up(
    scripted_llm: ScriptedLLM, instrument_with: Any, otel: Any
) -> None:
    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=10.0, output_per_mtok=30.0)})
    turns = iter(range(1000))
    scripted_llm.responder = lambda req: Turn(tool_calls=[ToolCall("lookup", {"q": str(next(turns))})],
                                              output_tokens=300)
    out = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_usd=0.05))).invoke(
        {"messages": [("user", "spend")]}, {"recursion_limit": 200})
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "cost"
    span = _run_span(otel)
    assert span.attributes["otel_budget.used.usd"] <= 0.05
    assert span.attributes["otel_budget.used.steps"] == len(scripted_llm.requests)


async def test_async_agent_stops_the_same_way(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_tool_calls=1)))
    out = await agent.ainvoke({"messages": [("user", "research")]})
    last = out["messages"][-1]
    assert last.response_metadata["otel_budget"]["stop_reason"] == "tool_calls"
    assert last.content.startswith("Stopped at a limit: max_tool_calls")
    assert executed == ["0"] and len(scripted_llm.requests) == 2
    assert _run_span(otel).attributes["stop.reason"] == "tool_calls"


def test_streamed_agent_ends_with_the_wrap_up_update(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=1)))
    updates = list(agent.stream({"messages": [("user", "research")]}, stream_mode="updates"))
    (stop_update,) = [u for u in updates if "BudgetMiddleware.before_model" in u and u["BudgetMiddleware.before_model"]]
    (message,) = stop_update["BudgetMiddleware.before_model"]["messages"]
    assert message.response_metadata["otel_budget"]["stop_reason"] == "steps"
    assert len(scripted_llm.requests) == 1
    assert _run_span(otel).attributes["stop.reason"] == "steps"


def test_a_budget_given_per_call_replaces_the_middlewares(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=5)))
    out = agent.invoke({"messages": [("user", "research")]},
                       {"configurable": {"otel_budget": otel_budget.Budget(max_steps=1)}})
    assert len(scripted_llm.requests) == 1
    assert out["messages"][-1].response_metadata["otel_budget"]["limit"] == "max_steps"
    assert _run_span(otel).attributes["otel_budget.limit.steps"] == 1


def test_config_budget_works_without_the_middleware(scripted_llm: ScriptedLLM, otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    out = _agent(scripted_llm).invoke({"messages": [("user", "research")]},
                                      {"configurable": {"otel_budget": otel_budget.Budget(max_steps=2)}})
    assert len(scripted_llm.requests) == 2
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"


def test_next_to_model_call_limit_middleware_the_tighter_limit_ends_the_agent(scripted_llm: ScriptedLLM,
                                                                              otel: Any) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, ModelCallLimitMiddleware(run_limit=5),
                   BudgetMiddleware(budget=otel_budget.Budget(max_steps=3)))
    out = agent.invoke({"messages": [("user", "research")]})
    assert len(scripted_llm.requests) == 3
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"

    scripted_llm.requests.clear()
    agent = _agent(scripted_llm, ModelCallLimitMiddleware(run_limit=2),
                   BudgetMiddleware(budget=otel_budget.Budget(max_steps=3)), name="limited")
    out = agent.invoke({"messages": [("user", "research")]})
    assert len(scripted_llm.requests) == 2
    assert out["messages"][-1].content.startswith("Model call limits exceeded")  # LangChain's own limit, as before
    limited = _run_span(otel, "limited")
    assert limited.attributes["stop.reason"] == "steps"  # ended by a limit: not done
    assert limited.attributes["otel_budget.stop.limit"] == "run_limit"


def test_an_agent_ended_by_tool_call_limit_middleware_ends_tool_calls(scripted_llm: ScriptedLLM, otel: Any) -> None:
    from langchain.agents.middleware import ToolCallLimitMiddleware

    _fresh_lookups(scripted_llm)
    out = _agent(scripted_llm, ToolCallLimitMiddleware(run_limit=2, exit_behavior="end")).invoke(
        {"messages": [("user", "research")]})
    assert executed == ["0", "1"] and len(scripted_llm.requests) == 3
    assert "otel_budget" not in out["messages"][-1].response_metadata  # LangChain's own ending, unchanged
    assert _run_span(otel).attributes["stop.reason"] == "tool_calls"


def test_a_healthy_agent_ends_done_with_its_answer(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(Turn(tool_calls=[ToolCall("lookup", {"q": "a"})]), Turn(text="All done."))
    out = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=5))).invoke(
        {"messages": [("user", "find a")]})
    assert out["messages"][-1].content == "All done."
    assert "otel_budget" not in out["messages"][-1].response_metadata
    assert _run_span(otel).attributes["stop.reason"] == "done"


def test_a_sub_agent_with_its_own_middleware_draws_from_the_parent(scripted_llm: ScriptedLLM, otel: Any) -> None:
    sub = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=10)), name="sub-researcher")

    @tool
    def research(topic: str) -> str:
        """Delegate research to a sub-agent."""
        return sub.invoke({"messages": [("user", topic)]})["messages"][-1].content

    turns = iter(range(1000))

    def respond(req: Any) -> Turn:
        n = next(turns)
        return Turn(tool_calls=[ToolCall("research", {"topic": "t"})] if n == 0 else [ToolCall("lookup", {"q": str(n)})])

    scripted_llm.responder = respond
    lead = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=3)), name="lead",
                  tools=[research])
    out = lead.invoke({"messages": [("user", "go")]})
    assert len(scripted_llm.requests) == 3  # the lead's cap bounds the sub-agent too
    (sub_span,) = [s for s in otel.get_finished_spans() if s.name == "invoke_agent sub-researcher"]
    assert sub_span.attributes["stop.reason"] == "steps"
    assert sub_span.context.trace_id == _run_span(otel, "lead").context.trace_id
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"


def test_a_budget_that_is_not_a_budget_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="takes an otel_budget.Budget, not dict"):
        BudgetMiddleware(budget={"max_steps": 3})  # type: ignore[arg-type]


@pytest.fixture
def uninstrumented() -> Iterator[None]:
    otel_budget.uninstrument()
    yield
    otel_budget.uninstrument()


def test_the_middleware_instruments_when_nothing_is(uninstrumented: None, scripted_llm: ScriptedLLM) -> None:
    _fresh_lookups(scripted_llm)
    agent = _agent(scripted_llm, BudgetMiddleware(budget=otel_budget.Budget(max_steps=1)))
    assert "langchain" in otel_budget.instrumented_libraries()
    out = agent.invoke({"messages": [("user", "research")]})
    assert len(scripted_llm.requests) == 1
    assert out["messages"][-1].response_metadata["otel_budget"]["stop_reason"] == "steps"


class Findings(BaseModel):
    summary: str


def _structured(llm: ScriptedLLM, strategy: str, *middleware: Any, max_tokens: int | None = 300) -> Any:
    model = ChatOpenAI(model=MODEL, base_url=llm.openai_base_url, api_key="x", max_retries=0, max_tokens=max_tokens)
    response_format = ToolStrategy(Findings) if strategy == "tool" else ProviderStrategy(Findings)
    return create_agent(model, [lookup], middleware=list(middleware), name="researcher",
                        response_format=response_format)


def _ends_with_the_wrap_up(out: dict[str, Any], reason: str) -> None:
    last = out["messages"][-1]
    assert last.type == "ai" and not last.tool_calls
    assert last.content.startswith("Stopped at a limit:")
    assert last.response_metadata["otel_budget"]["stop_reason"] == reason
    assert out.get("structured_response") is None  # no structured answer was produced


@pytest.mark.parametrize("strategy", ["tool", "provider"])
@pytest.mark.parametrize("given", ["middleware", "config"])
def test_a_structured_output_agent_stopped_at_a_refused_call_ends_with_the_wrap_up(
    scripted_llm: ScriptedLLM, otel: Any, strategy: str, given: str
) -> None:
    _fresh_lookups(scripted_llm)
    budget = otel_budget.Budget(max_steps=2)
    if given == "middleware":
        agent, config = _structured(scripted_llm, strategy, BudgetMiddleware(budget=budget)), {}
    else:  # no middleware: the third call is refused where it is sent and answered by the wrap-up
        agent, config = _structured(scripted_llm, strategy), {"configurable": {"otel_budget": budget}}
    out = agent.invoke({"messages": [("user", "research")]}, config)
    assert len(scripted_llm.requests) == 2 and executed == ["0", "1"]
    _ends_with_the_wrap_up(out, "steps")
    assert _run_span(otel).attributes["stop.reason"] == "steps"


@pytest.mark.parametrize("strategy", ["tool", "provider"])
async def test_a_structured_output_agent_whose_answer_is_cut_at_the_budgets_limit_ends_with_the_wrap_up(
    scripted_llm: ScriptedLLM, otel: Any, strategy: str
) -> None:
    scripted_llm.script(Turn(text='{"summary": "' + "word " * 2000, output_tokens=2000))
    agent = _structured(scripted_llm, strategy, max_tokens=None)
    out = await agent.ainvoke({"messages": [("user", "write")]},
                              {"configurable": {"otel_budget": otel_budget.Budget(max_total_tokens=300)}})
    (request,) = scripted_llm.requests
    assert 0 < request.body["max_completion_tokens"] < 300
    _ends_with_the_wrap_up(out, "tokens")
    assert "word word" not in out["messages"][-1].content
    assert _run_span(otel).attributes["stop.reason"] == "tokens"
    # The answer openai's parse() rejected (LengthFinishReasonError) is counted as the server reported it.
    (chat,) = [s for s in otel.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.usage.output_tokens"] == request.body["max_completion_tokens"]
