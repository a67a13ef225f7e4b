"""What the caller sees is what it would see without us: stream chunks and fields, raw response bodies, its own
exceptions. (The SDKs' own test suites check the same at scale: `make peer-tests`.)"""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]
METERED = ob.Budget(max_total_tokens=100_000)  # a token limit: the run needs every stream's reported usage


def _stream(oai, **kwargs):
    return list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True, **kwargs))


# --- include_usage: asked for (and its chunk hidden) inside any run; outside runs the request goes as it is --------


def test_outside_runs_a_stream_is_sent_as_is_and_the_servers_own_usage_chunk_reaches_the_caller(otel, llm, oai):
    llm.default = Turn(text="one two three", input_tokens=30, output_tokens=5, stream_usage=True)
    chunks = _stream(oai)
    assert "stream_options" not in llm.requests[0].body
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5  # the server's chunk, not hidden
    span = otel.chat_spans()[0]
    assert span.attributes["gen_ai.usage.output_tokens"] == 5  # and read from it
    assert "otel_budget.usage.estimated" not in span.attributes


def test_a_stream_without_usage_outside_runs_is_estimated_from_the_streamed_text_and_marked(otel, llm, oai):
    llm.default = Turn(text="x" * 40, input_tokens=30, output_tokens=5, chunks=4)
    chunks = _stream(oai)
    assert "stream_options" not in llm.requests[0].body
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "x" * 40
    span = otel.chat_spans()[0]
    assert span.attributes["gen_ai.usage.output_tokens"] == 10  # 40 characters / 4, not zero
    assert span.attributes["gen_ai.usage.input_tokens"] > 0
    assert span.attributes["otel_budget.usage.estimated"] is True


def test_an_unreported_stream_is_estimated_from_the_request_the_sdk_sent_not_a_copy_of_its_body(otel, llm, oai):
    llm.default = Turn(text="abcd" * 10, input_tokens=30, output_tokens=5)
    _stream(oai, temperature=0.5)
    sent = int(llm.requests[0].headers["content-length"])  # what the SDK serialized, measured without a copy
    assert otel.chat_spans()[0].attributes["gen_ai.usage.input_tokens"] == sent // 4
    assert otel.chat_spans()[0].attributes["gen_ai.usage.output_tokens"] == 10


def test_the_stream_helper_keeps_the_usage_the_server_sent(otel, llm, oai):
    llm.default = Turn(text='{"city": "Oslo"}', input_tokens=12, output_tokens=6, stream_usage=True)
    with oai.chat.completions.stream(model="gpt-4o", messages=MSG) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        final = stream.get_final_completion()
    assert final.usage is not None and final.usage.completion_tokens == 6
    assert [c.usage.completion_tokens for c in chunks if not c.choices] == [6]  # the usage chunk was not hidden


def test_in_a_metered_run_usage_is_asked_for_and_the_caller_sees_the_stream_as_without_it(otel, llm, oai):
    llm.default = Turn(text="one two three four", input_tokens=120, output_tokens=7, chunks=4)
    with ob.run("metered", budget=METERED) as run:
        chunks = _stream(oai)
    assert llm.requests[0].body["stream_options"] == {"include_usage": True}
    assert chunks and all(c.choices for c in chunks)  # the usage-only chunk never reached the caller
    assert all("usage" not in c.model_fields_set and "usage" not in c.to_dict() for c in chunks)
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (120, 7)


def test_in_a_metered_run_the_stream_helper_has_no_usage_the_caller_did_not_ask_for(otel, llm, oai):
    llm.default = Turn(text="hello", input_tokens=40, output_tokens=3)
    with ob.run("metered-helper", budget=METERED) as run:
        with oai.chat.completions.stream(model="gpt-4o", messages=MSG) as stream:
            final = stream.get_final_completion()
    assert final.usage is None  # as without us: the caller did not ask for include_usage
    assert run.outcome.usage.output_tokens == 3  # yet the run is charged what the API reported


def test_in_a_metered_run_a_caller_asking_for_usage_gets_it_unchanged(otel, llm, oai):
    llm.default = Turn(text="a b", input_tokens=50, output_tokens=2)
    with ob.run("metered-asked", budget=METERED) as run:
        chunks = _stream(oai, stream_options={"include_usage": True})
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    assert all("usage" in c.model_fields_set for c in chunks)
    assert run.outcome.usage.output_tokens == 2


# --- raw responses: never parsed, read or awaited for the caller ----------------------------------------------


def test_a_streaming_response_body_is_left_for_the_caller(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=21, output_tokens=3)
    with ob.run("streaming-response") as run:
        with oai.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MSG) as response:
            assert not response.http_response.is_stream_consumed  # we read nothing before the caller
            body = b"".join(response.iter_bytes())
        assert b'"completion_tokens":3' in body.replace(b" ", b"")
        assert run.usage.model_calls == 1  # settled with the estimate when the response closed
    assert len(otel.chat_spans()) == 1 and otel.chat_spans()[0].end_time is not None


def test_a_streaming_response_the_caller_parses_is_read_from_its_parse(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=21, output_tokens=3)
    with ob.run("parsed") as run:
        with oai.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MSG) as response:
            assert response.parse().choices[0].message.content == "x"
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (21, 3)
    assert len(otel.chat_spans()) == 1


def test_an_async_streaming_response_is_parsed_only_when_the_caller_awaits_it(otel, llm, aoai):
    llm.default = Turn(text="x", input_tokens=21, output_tokens=3)

    async def main() -> ob.Run:
        async with ob.run("async-parsed") as run:
            async with aoai.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MSG) as response:
                assert response.retries_taken == 0
                parsed = await response.parse()
                assert parsed.choices[0].message.content == "x"
        return run

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would fail here
        run = asyncio.run(main())
        gc.collect()
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (21, 3)


def test_an_async_raw_stream_parses_synchronously_as_the_sdk_does(otel, llm, aoai):
    llm.default = Turn(text="a b c", input_tokens=21, output_tokens=3)

    async def main() -> tuple[ob.Run, list]:
        async with ob.run("async-raw", budget=METERED) as run:
            raw = await aoai.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG, stream=True)
            chunks = [chunk async for chunk in raw.parse()]  # the SDK's raw response parses without await
        return run, chunks

    run, chunks = asyncio.run(main())
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "a b c"
    assert run.outcome.usage.output_tokens == 3


def test_an_anthropic_streaming_response_is_left_for_the_caller(otel, llm, anth):
    llm.default = Turn(text="x", input_tokens=9, output_tokens=2)
    with ob.run("anthropic-raw") as run:
        with anth.messages.with_streaming_response.create(model="claude-sonnet-4-5", max_tokens=50,
                                                          messages=MSG) as response:
            assert not response.http_response.is_stream_consumed
            assert response.parse().content[0].text == "x"
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (9, 2)


# --- the caller's own exceptions ------------------------------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


def test_an_exception_whose_str_raises_propagates_unchanged(otel, llm, oai):
    error = Unprintable("boom")
    with pytest.raises(Unprintable) as raised, ob.run("unprintable") as run:
        raise error
    assert raised.value is error
    assert run.outcome.stop_reason == "error"
    assert run.outcome.detail == "the run raised test_transparency.Unprintable"  # capture off: its type, no text
    assert otel.run_span("unprintable").attributes["stop.reason"] == "error"


def test_a_tool_exception_whose_str_raises_is_recorded_on_its_span(otel):
    @ob.tool()
    def fragile() -> str:
        raise Unprintable("boom")

    with pytest.raises(Unprintable), ob.run("tool-unprintable"):
        fragile()
    (span,) = otel.spans("execute_tool fragile")
    assert span.status.status_code.name == "ERROR" and "Unprintable" in span.status.description
