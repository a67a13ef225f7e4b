"""LiteLLM over the real openai SDK, against ScriptedLLM on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("litellm")

from litellm import acompletion, completion  # noqa: E402 - imported BEFORE instrument() on purpose

import otel_budget  # noqa: E402
from otel_budget.testing import ScriptedLLM, ToolCall, Turn  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
    "q": {"type": "string"}}}}}]


def _ask(llm: ScriptedLLM, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return completion(model="openai/gpt-4o", messages=messages, api_base=llm.openai_base_url, api_key="x",
                      tools=TOOLS, num_retries=0, **kwargs)


def agent(llm: ScriptedLLM, rounds: int = 20, **kwargs: Any) -> str:
    """A plain tool loop: ask, run the requested tools, ask again, until the model answers."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "find it"}]
    for _ in range(rounds):
        reply = _ask(llm, messages, **kwargs).choices[0].message
        if not reply.tool_calls:
            return str(reply.content)
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": tc.id, "type": "function", "function": {"name": tc.function.name,
                                                          "arguments": tc.function.arguments}}
            for tc in reply.tool_calls]})
        for tc in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": "nothing yet"})
    return "gave up"


def _spans(otel: Any, prefix: str) -> list[Any]:
    return [s for s in otel.get_finished_spans() if s.name.startswith(prefix)]


def test_healthy_run_is_done_with_one_chat_span_per_request(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.script(
        Turn(tool_calls=[ToolCall("lookup", {"q": "a"})], input_tokens=40, output_tokens=10),
        Turn(text="Found it.", input_tokens=60, output_tokens=5),
    )
    with otel_budget.run("litellm-agent", budget=otel_budget.Budget(max_steps=10)) as run:
        answer = agent(scripted_llm)
    outcome = run.outcome
    assert answer == "Found it."
    assert outcome is not None and outcome.stop_reason == "done"
    assert outcome.usage.model_calls == len(scripted_llm.requests) == 2
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (100, 15)
    assert outcome.usage.tool_calls == 1
    (run_span,) = _spans(otel, "invoke_agent")
    chats = _spans(otel, "chat ")
    assert len(chats) == 2  # LiteLLM is the outer layer: the openai SDK underneath adds no second span
    assert {s.name for s in chats} == {"chat gpt-4o"}
    assert all(s.parent.span_id == run_span.context.span_id for s in chats)
    assert chats[0].attributes["gen_ai.provider.name"] == "openai"
    assert run_span.attributes["stop.reason"] == "done"


def test_stuck_run_is_stopped_by_repeat(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(tool_calls=[ToolCall("lookup", {"q": "same"})], input_tokens=30, output_tokens=8)
    with otel_budget.run("litellm-stuck", budget=otel_budget.Budget(max_repeats=3)) as run:
        agent(scripted_llm)
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "repeat"
    assert len(scripted_llm.requests) == 3 == outcome.usage.model_calls
    assert outcome.wrap_up.startswith("Stopped at a limit: max_repeats")


def test_runaway_run_is_stopped_by_cost_without_overshoot(
    scripted_llm: ScriptedLLM, instrument_with: Any
) -> None:
    instrument_with(prices={"gpt-4o": otel_budget.Price(input_per_mtok=200.0, output_per_mtok=800.0)})
    counter = iter(range(1000))
    scripted_llm.responder = lambda request: Turn(
        tool_calls=[ToolCall("lookup", {"q": f"page {next(counter)}"})], output_tokens=20
    )
    cap = 1.0
    # every lookup answers "nothing yet": max_stalls off, so the money cap is what stops it
    with otel_budget.run("litellm-runaway", budget=otel_budget.Budget(max_usd=cap, max_stalls=None)) as run:
        agent(scripted_llm, rounds=200, max_tokens=50)
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "cost" and outcome.limit == "max_usd"
    assert outcome.usage.cost_usd <= cap * 1.02  # at most the input-estimate error of one call
    assert outcome.usage.model_calls == len(scripted_llm.requests) > 2


def test_stream_and_acompletion_are_counted_once_and_usage_chunk_is_hidden(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.script(
        Turn(text="one two three", input_tokens=11, output_tokens=6),
        Turn(text="async reply", input_tokens=7, output_tokens=3),
        Turn(text="async stream", input_tokens=5, output_tokens=2),
    )

    async def both() -> tuple[str, list[Any]]:
        reply = await acompletion(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                  api_base=scripted_llm.openai_base_url, api_key="x")
        stream = await acompletion(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                   api_base=scripted_llm.openai_base_url, api_key="x", stream=True)
        return str(reply.choices[0].message.content), [chunk async for chunk in stream]

    with otel_budget.run("litellm-stream", budget=otel_budget.Budget(max_total_tokens=1_000_000)) as run:
        chunks = list(completion(model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                 api_base=scripted_llm.openai_base_url, api_key="x", stream=True))
        text, async_chunks = asyncio.run(both())
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one two three"
    assert all(c.choices for c in chunks + async_chunks)  # the usage chunk we asked for is not shown
    assert text == "async reply"
    assert scripted_llm.requests[0].body["stream_options"] == {"include_usage": True}
    usage = run.outcome.usage if run.outcome else None
    assert usage is not None and usage.model_calls == 3 == len(scripted_llm.requests)
    assert (usage.input_tokens, usage.output_tokens) == (23, 11)
    assert len(_spans(otel, "chat ")) == 3


def test_nested_run_draws_from_the_parent_budget(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("parent", budget=otel_budget.Budget(max_steps=3)) as parent:
        _ask(scripted_llm, [{"role": "user", "content": "plan"}])
        with otel_budget.run("child", budget=otel_budget.Budget(max_steps=10)) as child:
            for _ in range(5):
                _ask(scripted_llm, [{"role": "user", "content": "work"}])
    assert child.outcome is not None and child.outcome.stop_reason == "steps"
    assert child.outcome.usage.model_calls == 2
    assert parent.outcome is not None and parent.outcome.usage.model_calls == 3 == len(scripted_llm.requests)


def test_uninstrument_restores_the_dispatch_methods() -> None:
    from litellm.rust_bridge.dispatch import PublicDispatch

    before = (PublicDispatch.__dict__["run"], PublicDispatch.__dict__["arun"])
    otel_budget.instrument()
    try:
        assert PublicDispatch.__dict__["run"] is not before[0]
    finally:
        otel_budget.uninstrument()
    assert (PublicDispatch.__dict__["run"], PublicDispatch.__dict__["arun"]) == before
    assert json.dumps(otel_budget.instrumented_libraries()) == "[]"


def test_a_stream_in_a_run_without_limits_counts_the_reported_usage(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="one two three", input_tokens=1_234, output_tokens=56)
    kwargs: dict[str, Any] = {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                              "api_base": scripted_llm.openai_base_url, "api_key": "x", "stream": True}
    outside = [c.choices[0].delta.content for c in completion(**kwargs) if c.choices]
    with otel_budget.run("litellm-exact") as run:
        inside = [c.choices[0].delta.content for c in completion(**kwargs) if c.choices]
    assert "stream_options" not in scripted_llm.requests[0].body
    assert scripted_llm.requests[1].body["stream_options"] == {"include_usage": True}
    assert inside == outside
    assert run.outcome is not None
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (1_234, 56)


def test_a_server_rejecting_stream_options_gets_one_retry_and_is_remembered(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.default = Turn(text="one two three", input_tokens=1_234, output_tokens=56)
    scripted_llm.reject_stream_options = True
    kwargs: dict[str, Any] = {"model": "openai/gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                              "api_base": scripted_llm.openai_base_url, "api_key": "x", "stream": True}

    async def streamed() -> str:
        return "".join([c.choices[0].delta.content or "" async for c in await acompletion(**kwargs) if c.choices])

    with otel_budget.run("litellm-old-server") as run:
        first = "".join(c.choices[0].delta.content or "" for c in completion(**kwargs) if c.choices)
        second = asyncio.run(streamed())
    assert first == second == "one two three"
    assert ["stream_options" in r.body for r in scripted_llm.requests] == [True, False, False]
    assert run.outcome is not None and run.outcome.usage.model_calls == 2
    spans = _spans(otel, "chat ")
    assert len(spans) == 2 and all(s.attributes["otel_budget.usage.estimated"] is True for s in spans)
