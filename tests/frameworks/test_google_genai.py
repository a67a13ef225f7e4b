"""google-genai (the real SDK) against ScriptedLLM's Gemini route on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

genai = pytest.importorskip("google.genai")

from google.genai import types  # noqa: E402

import otel_budget  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

MODEL = "gemini-2.5-flash"
executed: list[str] = []


def lookup(q: str) -> str:
    """Look something up."""
    executed.append(q)
    return "nothing yet"


async def alookup(q: str) -> str:
    """Look something up, asynchronously."""
    executed.append(q)
    return "nothing yet"


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    executed.clear()
    yield
    executed.clear()


def _client(llm: ScriptedLLM) -> Any:
    return genai.Client(api_key="x", http_options=types.HttpOptions(base_url=llm.base_url))


def _config(tool: Any = lookup, **kwargs: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        tools=[tool],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(maximum_remote_calls=100),
        **kwargs,
    )


def _spans(otel: Any, prefix: str) -> list[Any]:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def test_healthy_run_with_automatic_function_calling_is_done(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], input_tokens=40, output_tokens=10),
        Turn(text="Found it.", input_tokens=60, output_tokens=9, reasoning_tokens=4, cache_read_tokens=20),
    )
    with otel_budget.run("gemini-agent", budget=otel_budget.Budget(max_steps=10)) as run:
        client = _client(scripted_llm)  # keep a reference: a collected Client closes its connection
        reply = client.models.generate_content(model=MODEL, contents="find it", config=_config())
    assert reply.text == "Found it."
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "done"
    assert outcome.usage.model_calls == len(scripted_llm.requests) == 2
    # Output = candidates + thoughts; input = prompt tokens, cached ones included.
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (100, 19)
    assert (outcome.usage.reasoning_tokens, outcome.usage.cache_read_tokens) == (4, 20)
    assert outcome.usage.tool_calls == 1
    (run_span,) = _spans(otel, "invoke_agent")
    chats = _spans(otel, "generate_content ")
    assert [s.name for s in chats] == [f"generate_content {MODEL}"] * 2
    assert all(s.parent.span_id == run_span.context.span_id for s in chats)
    assert chats[1].attributes["gen_ai.provider.name"] == "gcp.gemini"
    assert chats[1].attributes["gen_ai.usage.output_tokens"] == 9
    assert chats[1].attributes["gen_ai.usage.reasoning.output_tokens"] == 4
    assert executed == ["a"]
    (tool_span,) = _spans(otel, "execute_tool")
    assert tool_span.name == "execute_tool lookup" and tool_span.parent.span_id == run_span.context.span_id


def test_stuck_run_is_stopped_by_repeat(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})], input_tokens=30, output_tokens=8)
    client = _client(scripted_llm)
    with otel_budget.run("gemini-stuck", budget=otel_budget.Budget(max_repeats=3)) as run:
        client.models.generate_content(model=MODEL, contents="find it", config=_config())
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "repeat"
    assert len(scripted_llm.requests) == 3 == outcome.usage.model_calls
    assert outcome.wrap_up.startswith("Stopped at a limit: max_repeats")
    assert executed == ["same", "same"]  # the third identical execution was refused before it ran
    assert outcome.usage.tool_calls == 3  # the three requests, each execution counted with its request
    (run_span,) = _spans(otel, "invoke_agent")
    tools = _spans(otel, "execute_tool")
    assert [s.name for s in tools] == ["execute_tool lookup"] * 2
    for span in tools:
        assert span.parent.span_id == run_span.context.span_id
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "lookup"


@pytest.mark.parametrize("tool", [lookup, alookup], ids=["sync-function", "async-function"])
def test_async_automatic_function_calling_is_refused_before_the_third_identical_execution(
    scripted_llm: ScriptedLLM, otel: Any, tool: Any
) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall(tool.__name__, {"q": "same"})], input_tokens=30, output_tokens=8)
    client = _client(scripted_llm)

    async def go() -> None:
        async with otel_budget.run("gemini-stuck-async", budget=otel_budget.Budget(max_repeats=3)) as run:
            await client.aio.models.generate_content(model=MODEL, contents="find it", config=_config(tool))
        assert run.outcome is not None and run.outcome.stop_reason == "repeat"
        assert run.outcome.usage.model_calls == 3

    asyncio.run(go())
    assert len(scripted_llm.requests) == 3
    assert executed == ["same", "same"]
    assert [s.name for s in _spans(otel, "execute_tool")] == [f"execute_tool {tool.__name__}"] * 2


def test_chat_automatic_function_calling_is_refused_before_the_third_identical_execution(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})], input_tokens=30, output_tokens=8)
    client = _client(scripted_llm)
    with otel_budget.run("gemini-chat", budget=otel_budget.Budget(max_repeats=3)) as run:
        client.chats.create(model=MODEL, config=_config()).send_message("find it")
    assert run.outcome is not None and run.outcome.stop_reason == "repeat"
    assert len(scripted_llm.requests) == 3 and executed == ["same", "same"]
    assert len(_spans(otel, "execute_tool lookup")) == 2


def test_a_tool_cap_refuses_the_execution_and_the_next_call(scripted_llm: ScriptedLLM, otel: Any) -> None:
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall("lookup", {"q": f"page {next(counter)}"})], input_tokens=30, output_tokens=8
    )
    client = _client(scripted_llm)
    with otel_budget.run("gemini-tools", budget=otel_budget.Budget(max_tool_calls=2)) as run:
        client.models.generate_content(model=MODEL, contents="find it", config=_config())
    assert run.outcome is not None and run.outcome.stop_reason == "tool_calls"
    assert executed == ["page 0", "page 1"]
    assert len(scripted_llm.requests) == 3 == run.outcome.usage.model_calls
    assert len(_spans(otel, "execute_tool lookup")) == 2


def test_runaway_run_is_stopped_by_cost_without_overshoot(
    scripted_llm: ScriptedLLM, instrument_with: Any
) -> None:
    instrument_with(prices={MODEL: otel_budget.Price(input_per_mtok=200.0, output_per_mtok=800.0)})
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall("lookup", {"q": f"page {next(counter)}"})], output_tokens=20
    )
    cap = 1.0
    client = _client(scripted_llm)
    # every lookup answers "nothing yet": max_stalls off, so the money cap is what stops it
    with otel_budget.run("gemini-runaway", budget=otel_budget.Budget(max_usd=cap, max_stalls=None)) as run:
        client.models.generate_content(
            model=MODEL, contents="find it", config=_config(max_output_tokens=50)
        )
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "cost" and outcome.limit == "max_usd"
    assert outcome.usage.cost_usd <= cap * 1.02  # at most the input-estimate error of one call
    assert outcome.usage.model_calls == len(scripted_llm.requests) > 2


def test_streams_and_async_calls_are_counted_once(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(
        Turn(text="one two three", input_tokens=11, output_tokens=6, reasoning_tokens=2),
        Turn(text="async reply", input_tokens=7, output_tokens=3),
        Turn(text="async stream", input_tokens=5, output_tokens=2),
    )
    client = _client(scripted_llm)

    async def both() -> tuple[str, list[str]]:
        reply = await client.aio.models.generate_content(model=MODEL, contents="hi")
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
        return str(reply.text), [str(chunk.text) async for chunk in stream]

    with otel_budget.run("gemini-stream") as run:
        text = "".join(c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents="hi"))
        reply, pieces = asyncio.run(both())
    assert (text, reply, "".join(pieces)) == ("one two three", "async reply", "async stream")
    usage = run.outcome.usage if run.outcome else None
    assert usage is not None and usage.model_calls == 3 == len(scripted_llm.requests)
    assert (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens) == (23, 11, 2)
    assert len(_spans(otel, "generate_content ")) == 3


def test_budget_sets_the_output_limit_of_a_request_that_has_none(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="a long answer " * 20, input_tokens=10, output_tokens=500)
    client = _client(scripted_llm)
    with otel_budget.run("gemini-tokens", budget=otel_budget.Budget(max_output_tokens=100)) as run:
        client.models.generate_content(model=MODEL, contents="write")
    assert scripted_llm.requests[0].body["generationConfig"]["maxOutputTokens"] == 100
    assert run.outcome is not None and run.outcome.usage.output_tokens == 100


def test_nested_run_draws_from_the_parent_budget(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    client = _client(scripted_llm)
    with otel_budget.run("parent", budget=otel_budget.Budget(max_steps=3)) as parent:
        client.models.generate_content(model=MODEL, contents="plan")
        with otel_budget.run("child", budget=otel_budget.Budget(max_steps=10)) as child:
            for _ in range(5):
                client.models.generate_content(model=MODEL, contents="work")
    assert child.outcome is not None and child.outcome.stop_reason == "steps"
    assert parent.outcome is not None and parent.outcome.usage.model_calls == 3 == len(scripted_llm.requests)


def test_uninstrument_restores_the_request_methods_and_the_function_invokers() -> None:
    from google.genai import _adapters, _api_client, _extra_utils

    names = ("request", "request_streamed", "async_request", "async_request_streamed")
    before = [_api_client.BaseApiClient.__dict__[n] for n in names]
    invokers = ("invoke_function_from_dict_args", "invoke_function_from_dict_args_async")
    before_invokers = [getattr(_extra_utils, n) for n in invokers]
    before_mcp = _adapters.McpToGenAiToolAdapter.__dict__["call_tool"]
    otel_budget.instrument()
    try:
        assert _api_client.BaseApiClient.__dict__["request"] is not before[0]
        assert all(getattr(_extra_utils, n) is not b for n, b in zip(invokers, before_invokers, strict=True))
        assert _adapters.McpToGenAiToolAdapter.__dict__["call_tool"] is not before_mcp
    finally:
        otel_budget.uninstrument()
    assert all(_api_client.BaseApiClient.__dict__[n] is b for n, b in zip(names, before, strict=True))
    assert all(getattr(_extra_utils, n) is b for n, b in zip(invokers, before_invokers, strict=True))
    assert _adapters.McpToGenAiToolAdapter.__dict__["call_tool"] is before_mcp


async def _with_mcp_session(llm: ScriptedLLM, budget: otel_budget.Budget) -> Any:
    """An agent whose tool comes from a real MCP session (the mcp SDK's in-process server), run by the SDK's
    automatic function calling. The config is a dict: the SDK deep-copies a GenerateContentConfig, which a live
    MCP session does not survive."""
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("kb")

    @server.tool()
    def lookup(q: str) -> str:
        """Look something up."""
        executed.append(q)
        return "nothing yet"

    async with Client(server) as mcp_client, otel_budget.run("gemini-mcp", budget=budget) as run:
        afc = types.AutomaticFunctionCallingConfig(maximum_remote_calls=100)
        await _client(llm).aio.models.generate_content(
            model=MODEL, contents="find it", config={"tools": [mcp_client.session], "automatic_function_calling": afc})
    return run


def test_mcp_session_tools_are_refused_before_the_third_identical_execution_and_spanned(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})], input_tokens=30, output_tokens=8)
    run = asyncio.run(_with_mcp_session(scripted_llm, otel_budget.Budget(max_repeats=3)))
    assert run.outcome.stop_reason == "repeat" and run.outcome.usage.model_calls == 3
    assert len(scripted_llm.requests) == 3
    assert executed == ["same", "same"]  # the third identical execution never reached the MCP server
    tools = _spans(otel, "execute_tool lookup")
    assert len(tools) == 2 and all(s.instrumentation_scope.name == "otel_budget" for s in tools)


def test_a_tool_cap_refuses_an_mcp_tool_execution(scripted_llm: ScriptedLLM, otel: Any) -> None:
    pytest.importorskip("mcp.server.mcpserver")
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall("lookup", {"q": f"page {next(counter)}"})], input_tokens=30, output_tokens=8
    )
    run = asyncio.run(_with_mcp_session(scripted_llm, otel_budget.Budget(max_tool_calls=2)))
    assert run.outcome.stop_reason == "tool_calls"
    assert executed == ["page 0", "page 1"]
    assert len(scripted_llm.requests) == 3 == run.outcome.usage.model_calls
    assert len(_spans(otel, "execute_tool lookup")) == 2
