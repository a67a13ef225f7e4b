"""Streams are counted on every path: exhausted, closed early, dropped, helpers, with and without include_usage."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import ToolCall, Turn

MSG = [{"role": "user", "content": "hi"}]
#: A token limit: the run needs every stream's reported usage, so chat streams get `include_usage` added.
METERED = ob.Budget(max_total_tokens=1_000_000)


def test_chat_stream_gets_usage_without_the_caller_asking_and_hides_the_extra_chunk(otel, llm, oai):
    llm.default = Turn(text="one two three four", input_tokens=120, output_tokens=7, chunks=4)
    with ob.run("s", budget=METERED) as run:
        chunks = list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
    assert llm.requests[0].body["stream_options"] == {"include_usage": True}
    assert all(c.choices for c in chunks)  # the usage-only chunk never reached the caller
    assert all(c.usage is None for c in chunks)
    assert run.outcome.usage.input_tokens == 120
    assert run.outcome.usage.output_tokens == 7
    span = otel.chat_spans()[0]
    assert span.attributes["gen_ai.usage.output_tokens"] == 7


def test_chat_stream_with_include_usage_from_the_caller_keeps_the_chunk(otel, llm, oai):
    llm.default = Turn(text="a b", input_tokens=50, output_tokens=2)
    with ob.run("s") as run:
        chunks = list(
            oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True,
                                        stream_options={"include_usage": True})
        )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert run.outcome.usage.output_tokens == 2


def test_stream_helper_and_tool_call_deltas_are_counted(otel, llm, oai):
    llm.default = Turn(tool_calls=[ToolCall("lookup", {"id": 7})], input_tokens=30, output_tokens=9)
    with ob.run("helper", budget=METERED) as run:
        with oai.chat.completions.stream(model="gpt-4o", messages=MSG) as stream:
            final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.name == "lookup"
    assert run.outcome.usage.output_tokens == 9
    assert run.outcome.usage.tool_calls == 1


def test_stream_closed_half_way_is_settled_to_an_estimate_not_zero(otel, llm, oai):
    llm.default = Turn(text=" ".join(["word"] * 40), input_tokens=80, output_tokens=60, chunks=20)
    with ob.run("early") as run:
        stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        assert run.usage.model_calls == 1
    usage = run.outcome.usage
    assert usage.model_calls == 1
    assert usage.output_tokens > 0
    assert usage.input_tokens > 0
    assert len(otel.chat_spans()) == 1


def test_abandoned_stream_is_settled_by_garbage_collection(otel, llm, oai):
    llm.default = Turn(text="a b c d e f", input_tokens=40, output_tokens=6)
    with ob.run("gc") as run:
        stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
        next(iter(stream))
        del stream
        gc.collect()
        assert run.usage.model_calls == 1
    assert len(otel.chat_spans()) == 1
    assert otel.chat_spans()[0].end_time is not None


def test_a_stream_still_open_when_the_program_exits_gets_its_span(llm):
    """Outside any run nothing else settles a stream the program still holds unread when it exits: the exit does,
    so its span is exported before the tracer provider shuts down (made before the stream, it shuts down after)."""
    llm.default = Turn(text="a b c d e f", input_tokens=40, output_tokens=6)
    script = textwrap.dedent(f"""
        import openai
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
        import otel_budget as ob
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=lambda s: s.name + "\\n")))
        ob.instrument(tracer_provider=provider)
        client = openai.OpenAI(base_url={llm.openai_base_url!r}, api_key="test", max_retries=0)
        KEPT = client.chat.completions.create(model="gpt-4o", messages=[{{"role": "user", "content": "hi"}}],
                                              stream=True)
        next(iter(KEPT))
        print("read one chunk", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["read one chunk", "chat gpt-4o"]


def test_streams_read_closed_and_dropped_from_many_threads_are_each_counted_once(otel, llm, oai):
    """A storm of streams in a pool, a third read to the end, a third closed early, a third dropped after one chunk:
    every request that reached the server is one model call of the run and one ended span, none twice."""
    llm.default = Turn(text="a b c d e f g h", input_tokens=40, output_tokens=8, chunks=8)

    def work(i: int) -> None:
        stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
        if i % 3 == 0:
            list(stream)
        elif i % 3 == 1:
            next(iter(stream))
            stream.close()
        else:
            next(iter(stream))
            del stream

    with ob.run("storm", budget=ob.Budget(max_steps=1_000, max_usd=10.0)) as run, ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(60)))
        gc.collect()
    assert len(llm.requests) == 60
    assert run.outcome.usage.model_calls == 60
    assert run.outcome.stop_reason == "done"
    spans = otel.chat_spans()
    assert len(spans) == 60 and all(span.end_time is not None for span in spans)
    assert run.outcome.usage.output_tokens >= 20 * 8  # the streams read to the end count what the server reported


def test_dropped_stream_raises_the_sdk_error_and_is_settled_once(otel, llm, oai):
    llm.default = Turn(text=" ".join(["w"] * 30), input_tokens=40, output_tokens=30, chunks=15, break_stream_after=4)
    with pytest.raises(openai.APIConnectionError), ob.run("dropped"):
        for _ in oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True):
            pass
    spans = otel.chat_spans()
    assert len(spans) == 1
    assert spans[0].status.status_code.name == "ERROR"
    assert otel.run_span("dropped").attributes["otel_budget.used.steps"] == 1


def test_responses_api_create_and_stream(otel, llm, oai):
    llm.default = Turn(text="hello there", input_tokens=33, output_tokens=4, cache_read_tokens=10)
    with ob.run("responses") as run:
        r = oai.responses.create(model="gpt-4o", input="hi")
        with oai.responses.stream(model="gpt-4o", input="hi") as s:
            final = s.get_final_response()
        raw = list(oai.responses.create(model="gpt-4o", input="hi", stream=True))
    assert r.output_text == "hello there" and final.output_text == "hello there" and raw
    assert run.outcome.usage.model_calls == 3
    assert run.outcome.usage.input_tokens == 99
    assert run.outcome.usage.cache_read_tokens == 30


def test_async_streams_openai_and_anthropic(otel, llm, aoai, aanth):
    llm.default = Turn(text="a b c", input_tokens=20, output_tokens=3)

    async def main() -> ob.Run:
        async with ob.run("async-streams", budget=METERED) as run:
            stream = await aoai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
            async for _ in stream:
                pass
            astream = await aanth.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=MSG, stream=True)
            async for _ in astream:
                pass
            async with aanth.messages.stream(model="claude-sonnet-4-5", max_tokens=50, messages=MSG) as s:
                await s.get_final_message()
        return run

    run = asyncio.run(main())
    assert run.outcome.usage.model_calls == 3
    assert run.outcome.usage.output_tokens == 9
    assert run.outcome.usage.input_tokens == 60


def test_anthropic_stream_usage_and_tool_use(otel, llm, anth):
    llm.default = Turn(tool_calls=[ToolCall("get_page", {"n": 1})], input_tokens=500, cache_read_tokens=300,
                       cache_write_tokens=100, output_tokens=12)
    with ob.run("anthropic-stream") as run:
        with anth.messages.stream(model="claude-sonnet-4-5", max_tokens=100, messages=MSG) as s:
            msg = s.get_final_message()
    assert msg.content[0].type == "tool_use"
    u = run.outcome.usage
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens) == (500, 300, 100, 12)
    assert u.tool_calls == 1


def test_malformed_stream_surfaces_and_settles(otel, llm, oai):
    llm.default = Turn(text="a b c d", input_tokens=10, output_tokens=4, malformed=True)
    with pytest.raises(Exception) as err, ob.run("malformed"):  # noqa: B017 - the SDK's own decoding error
        for _ in oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True):
            pass
    assert not isinstance(err.value, ob.BudgetExceeded)
    assert len(otel.chat_spans()) == 1
    assert otel.run_span("malformed").attributes["stop.reason"] == "error"


def test_non_stream_call_still_works_after_stream_calls(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=5, output_tokens=1)
    with ob.run("mixed") as run:
        list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
        ask(oai)
    assert run.outcome.usage.model_calls == 2


def test_streaming_raw_response_is_counted_when_parsed(otel, llm, oai):
    llm.default = Turn(text="a b c", input_tokens=21, output_tokens=3)
    with ob.run("raw", budget=METERED) as run:
        with oai.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MSG,
                                                                 stream=True) as response:
            chunks = list(response.parse())
        raw = oai.responses.with_raw_response.create(model="gpt-4o", input="hi", stream=True)
        events = list(raw.parse())
    assert chunks and events
    assert run.outcome.usage.model_calls == 2
    assert run.outcome.usage.input_tokens == 42
    assert run.outcome.usage.output_tokens == 6


def test_async_streaming_raw_response_is_counted(otel, llm, aoai):
    llm.default = Turn(text="a b c", input_tokens=21, output_tokens=3)

    async def main() -> ob.Run:
        async with ob.run("araw") as run:
            async with aoai.responses.with_streaming_response.create(model="gpt-4o", input="hi",
                                                                     stream=True) as response:
                async for _ in await response.parse():
                    pass
        return run

    run = asyncio.run(main())
    assert run.outcome.usage.input_tokens == 21
    assert run.outcome.usage.output_tokens == 3


def test_a_call_span_begins_when_the_call_is_sent_and_ends_when_its_stream_ends(otel, llm, oai):
    """The SDK span of a call is made when the call settles (with every attribute at once), but it says when the call
    began and ended, and its parent is the span that was current when it began (the run's)."""
    import time

    llm.default = Turn(text="one two three four", input_tokens=20, output_tokens=4, chunks=4)
    with ob.run("timed", budget=METERED):
        before = time.time_ns()
        stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
        sent = time.time_ns()
        time.sleep(0.2)
        assert not otel.chat_spans()  # open until the stream is read to its end
        list(stream)
        done = time.time_ns()
    span = otel.chat_spans()[0]
    assert before <= span.start_time <= sent
    assert sent + 200_000_000 <= span.end_time <= done
    run_span = otel.run_span("timed")
    assert span.parent.span_id == run_span.context.span_id
    assert span.context.trace_id == run_span.context.trace_id
    assert span.attributes["gen_ai.usage.input_tokens"] == 20
    assert span.attributes["gen_ai.request.model"] == "gpt-4o"
