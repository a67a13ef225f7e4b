"""ScriptedLLM drives the real openai and anthropic SDKs over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import anthropic
import openai
import pytest

from otel_budget.testing import ScriptedLLM, ToolCall, Turn

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def oai(llm: ScriptedLLM) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="x", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def ant(llm: ScriptedLLM) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(
        base_url=llm.anthropic_base_url, api_key="x", max_retries=0, open_telemetry=False
    )
    yield client
    client.close()


# -- plain turns ----------------------------------------------------------------------------------


def test_chat_text_turn_returns_text_and_echoes_model(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="hello"))
    reply = oai.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert reply.choices[0].message.content == "hello"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "gpt-4o"


def test_chat_tool_call_turn_gives_function_tool_calls(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(tool_calls=[ToolCall("get_page", {"n": 2}), ToolCall("stop", {}, id="mine")]))
    reply = oai.chat.completions.create(model="gpt-4o", messages=MSGS)
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in calls] == ["get_page", "stop"]
    assert json.loads(calls[0].function.arguments) == {"n": 2}
    assert calls[0].id.startswith("call_") and calls[1].id == "mine"


def test_responses_tool_call_turn_gives_function_call_items(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(tool_calls=[ToolCall("get_page", {"n": 2})]))
    reply = oai.responses.create(model="gpt-4o", input="hi")
    (item,) = reply.output
    assert item.type == "function_call" and item.name == "get_page"
    assert json.loads(item.arguments) == {"n": 2} and item.call_id.startswith("call_")


def test_anthropic_text_and_tool_use_turns(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(Turn(text="hello"), Turn(tool_calls=[ToolCall("get_page", {"n": 2})]))
    first = ant.messages.create(model="claude-x", max_tokens=100, messages=MSGS)
    second = ant.messages.create(model="claude-x", max_tokens=100, messages=MSGS)
    assert first.content[0].text == "hello" and first.stop_reason == "end_turn"
    assert second.stop_reason == "tool_use"
    assert (second.content[0].type, second.content[0].name, second.content[0].input) == (
        "tool_use",
        "get_page",
        {"n": 2},
    )


# -- usage normalisation --------------------------------------------------------------------------

CACHED = Turn(
    text="ok",
    input_tokens=1000,
    output_tokens=50,
    cache_read_tokens=600,
    cache_write_tokens=100,
    reasoning_tokens=20,
)


def test_chat_usage_includes_cached_tokens_in_prompt_tokens(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(CACHED)
    usage = oai.chat.completions.create(model="gpt-4o", messages=MSGS).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1000, 50, 1050)
    assert usage.prompt_tokens_details.cached_tokens == 600
    assert usage.completion_tokens_details.reasoning_tokens == 20


def test_responses_usage_includes_cached_tokens_in_input_tokens(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(CACHED)
    usage = oai.responses.create(model="gpt-4o", input="hi").usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (1000, 50, 1050)
    assert usage.input_tokens_details.cached_tokens == 600
    assert usage.output_tokens_details.reasoning_tokens == 20


def test_anthropic_usage_excludes_cache_from_input_tokens(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(CACHED)
    usage = ant.messages.create(model="claude-x", max_tokens=100, messages=MSGS).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (
        300,
        600,
        100,
    )
    assert usage.output_tokens == 50


def test_unset_tokens_are_estimated_from_request_and_answer(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.default = Turn(text="x" * 40)
    short = oai.chat.completions.create(model="gpt-4o", messages=MSGS).usage
    long = oai.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi" * 401}]
    ).usage
    assert short.completion_tokens == 10
    assert abs((long.prompt_tokens - short.prompt_tokens) - 800 // 4) <= 1


# -- output limits --------------------------------------------------------------------------------

LONG = Turn(text="word " * 100, output_tokens=500)


def test_chat_max_tokens_truncates_with_length_finish(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(LONG, LONG)
    capped = oai.chat.completions.create(model="gpt-4o", messages=MSGS, max_completion_tokens=50)
    assert capped.usage.completion_tokens == 50 and capped.choices[0].finish_reason == "length"
    assert len(capped.choices[0].message.content) < len(LONG.text)
    roomy = oai.chat.completions.create(model="gpt-4o", messages=MSGS, max_tokens=1000)
    assert roomy.usage.completion_tokens == 500 and roomy.choices[0].finish_reason == "stop"


def test_responses_max_output_tokens_gives_incomplete(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(LONG)
    reply = oai.responses.create(model="gpt-4o", input="hi", max_output_tokens=30)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 30


def test_anthropic_max_tokens_stops_with_max_tokens(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(LONG)
    reply = ant.messages.create(model="claude-x", max_tokens=40, messages=MSGS)
    assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 40


# -- streaming ------------------------------------------------------------------------------------


def test_chat_stream_has_usage_chunk_only_when_asked(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="one two three", output_tokens=7), Turn(text="one two three", output_tokens=7))
    plain = list(oai.chat.completions.create(model="gpt-4o", messages=MSGS, stream=True))
    assert all(c.usage is None for c in plain) and all(c.choices for c in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "one two three"
    asked = list(
        oai.chat.completions.create(
            model="gpt-4o", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
    )
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens == 7
    assert all(c.usage is None for c in asked[:-1])


def test_chat_stream_helper_accumulates_text_tool_calls_and_usage(
    llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    llm.script(Turn(text="a b c d", tool_calls=[ToolCall("f", {"q": "z"})], output_tokens=9, chunks=3))
    with oai.chat.completions.stream(
        model="gpt-4o", messages=MSGS, stream_options={"include_usage": True}
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "a b c d"
    assert json.loads(message.tool_calls[0].function.arguments) == {"q": "z"}
    assert final.usage.completion_tokens == 9


def test_responses_stream_helper_gives_final_text_and_usage(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="streamed reply here", output_tokens=5, cache_read_tokens=2))
    with oai.responses.stream(model="gpt-4o", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "streamed reply here"
    assert final.usage.output_tokens == 5 and final.usage.input_tokens_details.cached_tokens == 2


def test_responses_raw_stream_ends_with_completed_event(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(tool_calls=[ToolCall("f", {"a": 1})]))
    events = list(oai.responses.create(model="gpt-4o", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output[0].name == "f"


def test_anthropic_stream_helper_gives_final_message(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(
        Turn(
            text="hi there",
            tool_calls=[ToolCall("f", {"a": [1]})],
            output_tokens=12,
            cache_write_tokens=4,
            input_tokens=10,
        )
    )
    with ant.messages.stream(model="claude-x", max_tokens=100, messages=MSGS) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "hi there" and final.content[1].input == {"a": [1]}
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.cache_creation_input_tokens, final.usage.output_tokens) == (
        6,
        4,
        12,
    )


def test_broken_stream_surfaces_as_connection_error(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="a b c d e", break_stream_after=2))
    with pytest.raises(openai.APIConnectionError):
        list(oai.chat.completions.create(model="gpt-4o", messages=MSGS, stream=True))
    llm.script(Turn(text="still serving"))
    assert (
        oai.chat.completions.create(model="gpt-4o", messages=MSGS).choices[0].message.content
        == "still serving"
    )


def test_malformed_stream_event_fails_json_decoding(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(Turn(text="a b", malformed=True))
    with (
        pytest.raises(ValueError),
        ant.messages.stream(model="claude-x", max_tokens=100, messages=MSGS) as stream,
    ):
        stream.get_final_message()


# -- errors, default, responder, records ----------------------------------------------------------


def test_scripted_status_raises_the_sdk_exception(
    llm: ScriptedLLM, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    llm.script(Turn(status=429, error_message="slow down"), Turn(status=500))
    with pytest.raises(openai.RateLimitError, match="slow down"):
        oai.chat.completions.create(model="gpt-4o", messages=MSGS)
    with pytest.raises(anthropic.InternalServerError) as info:
        ant.messages.create(model="claude-x", max_tokens=10, messages=MSGS)
    assert info.value.body["error"]["type"] == "api_error"


def test_empty_script_without_default_is_a_clear_500(llm: ScriptedLLM) -> None:
    # Retries stay on: the server's `x-should-retry: false` must stop them.
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="x")
    with client, pytest.raises(openai.InternalServerError, match="no scripted turn left"):
        client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert len(llm.requests) == 1


def test_default_turn_serves_when_queue_is_empty(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="first"))
    llm.default = Turn(tool_calls=[ToolCall("next_page", {})])
    texts = [oai.chat.completions.create(model="m", messages=MSGS).choices[0].message for _ in range(3)]
    assert texts[0].content == "first"
    assert [m.tool_calls[0].function.name for m in texts[1:]] == ["next_page", "next_page"]
    assert texts[1].tool_calls[0].id != texts[2].tool_calls[0].id


def test_responder_wins_over_queue_and_falls_back_on_none(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="queued"))
    llm.responder = lambda req: Turn(text="from responder") if req.body.get("user") == "vip" else None
    vip = oai.chat.completions.create(model="m", messages=MSGS, user="vip")
    other = oai.chat.completions.create(model="m", messages=MSGS)
    assert (vip.choices[0].message.content, other.choices[0].message.content) == ("from responder", "queued")


def test_requests_are_recorded_before_the_delay(llm: ScriptedLLM, ant: anthropic.Anthropic) -> None:
    llm.script(Turn(text="late", delay=1.0))
    worker = threading.Thread(
        target=ant.messages.create, kwargs={"model": "claude-x", "max_tokens": 5, "messages": MSGS}
    )
    worker.start()
    try:
        while not llm.requests and worker.is_alive():
            threading.Event().wait(0.01)
        assert worker.is_alive(), "the request must be visible while the answer is still delayed"
        (req,) = llm.requests
        assert (req.api, req.method, req.path, req.model) == (
            "anthropic.messages",
            "POST",
            "/v1/messages",
            "claude-x",
        )
        assert "anthropic-version" in req.headers and req.body["messages"] == MSGS
    finally:
        worker.join(10)


def test_reset_clears_script_default_responder_and_requests(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    llm.script(Turn(text="a"), Turn(text="b"))
    llm.default = Turn(text="d")
    llm.responder = lambda req: None
    oai.chat.completions.create(model="m", messages=MSGS)
    llm.reset()
    assert (llm.pending, llm.default, llm.responder, llm.requests) == (0, None, None, [])


def test_unknown_path_is_a_404(llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.embeddings.create(model="e", input="x")


# -- async clients --------------------------------------------------------------------------------


async def test_async_openai_concurrent_calls_each_get_one_turn(llm: ScriptedLLM) -> None:
    llm.script(*[Turn(text=f"t{i}") for i in range(6)])
    async with openai.AsyncOpenAI(base_url=llm.openai_base_url, api_key="x", max_retries=0) as client:
        replies = await asyncio.gather(
            *[client.chat.completions.create(model="m", messages=MSGS) for _ in range(6)]
        )
        llm.script(Turn(text="async stream", output_tokens=4))
        async with client.responses.stream(model="m", input="hi") as stream:
            final = await stream.get_final_response()
    assert sorted(r.choices[0].message.content for r in replies) == [f"t{i}" for i in range(6)]
    assert final.output_text == "async stream" and final.usage.output_tokens == 4


async def test_async_anthropic_stream_and_create(llm: ScriptedLLM) -> None:
    llm.script(Turn(text="streamed", output_tokens=3), Turn(text="plain"))
    async with anthropic.AsyncAnthropic(
        base_url=llm.anthropic_base_url, api_key="x", max_retries=0, open_telemetry=False
    ) as client:
        async with client.messages.stream(model="claude-x", max_tokens=50, messages=MSGS) as stream:
            final = await stream.get_final_message()
        plain = await client.messages.create(model="claude-x", max_tokens=50, messages=MSGS)
    assert final.content[0].text == "streamed" and final.usage.output_tokens == 3
    assert plain.content[0].text == "plain"
