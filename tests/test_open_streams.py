"""Streams left open are settled: when a `.stream()` helper closes, and when the run ends before the stream does.

Real openai and anthropic SDKs against ScriptedLLM. Each stream object is kept referenced until the assertions,
so garbage collection cannot be what settles it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]
BUDGET = ob.Budget(max_usd=1.0)  # a money cap: an open call holds its worst case ($0.041 for 4,096 tokens)


@pytest.fixture(autouse=True)
def long_answer(llm):
    llm.default = Turn(text=" ".join(f"word{i}" for i in range(40)), chunks=20, input_tokens=50, output_tokens=80)


def _released(run: ob.Run) -> bool:
    return all(abs(v) < 1e-9 for v in run.node.account.reserved.values())


def _helper_sync(kind: str, oai: Any, anth: Any) -> Any:
    if kind == "chat":
        return oai.chat.completions.stream(model="gpt-4o", messages=MSG)
    if kind == "responses":
        return oai.responses.stream(model="gpt-4o", input="hi")
    return anth.messages.stream(model="claude-sonnet-4-5", max_tokens=200, messages=MSG)


def _helper_async(kind: str, aoai: Any, aanth: Any) -> Any:
    if kind == "chat":
        return aoai.chat.completions.stream(model="gpt-4o", messages=MSG)
    if kind == "responses":
        return aoai.responses.stream(model="gpt-4o", input="hi")
    return aanth.messages.stream(model="claude-sonnet-4-5", max_tokens=200, messages=MSG)


HELPERS = pytest.mark.parametrize("kind", ["chat", "responses", "messages"])


@HELPERS
def test_leaving_a_stream_helper_early_settles_the_call_when_it_closes(otel, llm, oai, anth, kind):
    with ob.run("helper-early", budget=BUDGET) as run:
        with _helper_sync(kind, oai, anth) as stream:
            for _ in stream:
                break
        # The helper closed its response: the call is settled now, not at garbage collection.
        assert _released(run), run.node.account.reserved
        assert run.usage.model_calls == 1 and 0 < run.usage.cost_usd < 0.01
        assert [s.end_time is not None for s in otel.chat_spans()] == [True]
    assert stream is not None  # referenced until here
    assert run.outcome.usage.model_calls == 1
    assert len(llm.requests) == 1


@HELPERS
def test_leaving_an_async_stream_helper_early_settles_the_call_when_it_closes(otel, llm, aoai, aanth, kind):
    async def main() -> tuple[ob.Run, Any]:
        async with ob.run("helper-early", budget=BUDGET) as run:
            async with _helper_async(kind, aoai, aanth) as stream:
                async for _ in stream:
                    break
            assert _released(run), run.node.account.reserved
            assert run.usage.model_calls == 1 and run.usage.cost_usd > 0
            assert [s.end_time is not None for s in otel.chat_spans()] == [True]
        return run, stream

    run, stream = asyncio.run(main())
    assert stream is not None
    assert run.outcome.usage.model_calls == 1


def test_a_helper_read_to_its_end_is_counted_once(otel, llm, oai):
    with ob.run("helper-full", budget=BUDGET) as run:
        with oai.chat.completions.stream(model="gpt-4o", messages=MSG) as stream:
            stream.get_final_completion()
    assert run.outcome.usage.model_calls == 1
    assert run.outcome.usage.output_tokens == 80  # the reported usage, not an estimate
    assert len(otel.chat_spans()) == 1


def test_leaving_a_streaming_response_block_early_settles_the_call(otel, llm, oai):
    with ob.run("raw-early", budget=BUDGET) as run:
        with oai.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MSG,
                                                                 stream=True) as response:
            stream = response.parse()
            next(iter(stream))
        assert _released(run)
        assert run.usage.model_calls == 1 and run.usage.cost_usd > 0
        assert [s.end_time is not None for s in otel.chat_spans()] == [True]
    assert stream is not None and response is not None
    assert run.outcome.usage.model_calls == 1


def test_leaving_an_async_streaming_response_block_early_settles_the_call(otel, llm, aoai):
    async def main() -> tuple[ob.Run, Any]:
        async with ob.run("raw-early", budget=BUDGET) as run:
            async with aoai.responses.with_streaming_response.create(model="gpt-4o", input="hi",
                                                                     stream=True) as response:
                stream = await response.parse()
                async for _ in stream:
                    break
            assert _released(run)
            assert [s.end_time is not None for s in otel.chat_spans()] == [True]
        return run, stream

    run, stream = asyncio.run(main())
    assert stream is not None
    assert run.outcome.usage.model_calls == 1


def _open_sync(kind: str, oai: Any, anth: Any) -> Any:
    if kind == "chat":
        return oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
    if kind == "responses":
        return oai.responses.create(model="gpt-4o", input="hi", stream=True)
    return anth.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=MSG, stream=True)


@HELPERS
def test_a_stream_left_open_when_the_run_ends_is_settled_and_counted(otel, llm, oai, anth, kind):
    with ob.run("left-open", budget=BUDGET) as run:
        stream = _open_sync(kind, oai, anth)
        for i, _ in enumerate(stream):
            if i == 6:  # a few text deltas in, whatever the API's event shapes
                break  # no close()
    usage = run.outcome.usage
    assert usage.model_calls == 1
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.cost_usd > 0  # the best estimate
    assert _released(run)
    spans = otel.chat_spans()
    assert len(spans) == 1 and spans[0].end_time is not None
    assert otel.run_span("left-open").attributes["otel_budget.used.steps"] == 1
    assert "1 model call," in run.outcome.wrap_up  # the wrap-up is written after the open call was settled
    stream.close()  # closing it later settles nothing twice
    assert len(otel.chat_spans()) == 1
    assert run.node.usage().model_calls == 1


def test_an_async_stream_left_open_when_the_run_ends_is_counted(otel, llm, aoai, aanth):
    async def main() -> tuple[ob.Run, list[Any]]:
        async with ob.run("left-open", budget=BUDGET) as run:
            streams = [
                await aoai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True),
                await aanth.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=MSG, stream=True),
            ]
            for stream in streams:
                async for _ in stream:
                    break
        return run, streams

    run, streams = asyncio.run(main())
    assert streams
    assert run.outcome.usage.model_calls == 2
    assert run.outcome.usage.output_tokens > 0
    assert _released(run)
    assert [s.end_time is not None for s in otel.chat_spans()] == [True, True]


def test_a_child_run_that_ends_with_an_open_stream_charges_its_parent(otel, llm, oai):
    with ob.run("parent", budget=BUDGET) as parent:
        with ob.run("child") as child:
            stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
            next(iter(stream))
        assert child.outcome.usage.model_calls == 1
        assert parent.usage.model_calls == 1 and parent.usage.cost_usd > 0
        assert _released(parent)
    assert stream is not None
    assert parent.outcome.usage.model_calls == 1


def test_a_stream_read_to_its_end_goes_with_its_response_without_the_garbage_collector(otel, llm, oai):
    """What we hang on a stream (its response's close, the usage filter) holds it weakly: no reference cycle keeps
    the response and all it holds until the collector runs (a cycle per stream made four times the collections)."""
    import gc
    import weakref

    llm.default = Turn(text="one two three four", chunks=4)
    with ob.run("reader", budget=ob.Budget(max_usd=1.0, max_seconds=60)) as run:
        gc.disable()
        try:
            stream = oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
            response = weakref.ref(stream.response)
            for _ in stream:
                pass
            del stream
            assert response() is None
        finally:
            gc.enable()
    assert run.outcome.usage.model_calls == 1
