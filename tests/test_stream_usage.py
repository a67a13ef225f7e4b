"""Stream usage is exact in every run, whatever its limits (DESIGN, Enforcement rules: Streams).

Inside any run an OpenAI chat stream asks for `include_usage` and the caller sees the stream as the server sends it
without that option; outside runs the request goes unchanged and an estimate is marked on the span; a server that
rejects `stream_options` gets the request once more without it, and its base URL is remembered. Driven through the
real openai SDK (sync and async, `create(stream=True)` and the `.stream()` helper) against ScriptedLLM.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor

import otel_budget as ob
from otel_budget.core.pricing import PriceBook
from otel_budget.telemetry import semconv as sc
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

MSG = [{"role": "user", "content": "hi"}]
#: What the server reports: the run must count exactly this, not an estimate from the request and the text.
REPORTED = Turn(text="one two three four five", input_tokens=1_234, output_tokens=56, chunks=5)
ESTIMATED = sc.USAGE_ESTIMATED


class _OpenSpans(SpanProcessor):
    """Counts spans started and not ended (a retry must not leave one open)."""

    def __init__(self) -> None:
        self.open = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.open += 1

    def on_end(self, span: Any) -> None:
        self.open -= 1


_OPEN = _OpenSpans()
trace.get_tracer_provider().add_span_processor(_OPEN)  # type: ignore[attr-defined]


def _normal(data: dict[str, Any]) -> dict[str, Any]:
    """A chunk or completion as the caller sees it, without what differs between two answers (id, time)."""
    return {k: v for k, v in data.items() if k not in ("id", "created")}


# --- the four ways a caller streams a chat answer; each returns what the caller saw -------------------------------


def _sync_create(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    return [(_normal(c.to_dict()), sorted(c.model_fields_set))
            for c in client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True, **kwargs)]


def _sync_helper(client: openai.OpenAI, **kwargs: Any) -> list[Any]:
    with client.chat.completions.stream(model="gpt-4o", messages=MSG, **kwargs) as stream:
        seen = [event.type if event.type != "chunk" else _normal(event.chunk.to_dict()) for event in stream]
        final = stream.get_final_completion()
    return [*seen, _normal(final.to_dict())]


def _async_create(client: openai.AsyncOpenAI, **kwargs: Any) -> list[Any]:
    async def main() -> list[Any]:
        stream = await client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True, **kwargs)
        return [(_normal(c.to_dict()), sorted(c.model_fields_set)) async for c in stream]

    return asyncio.run(main())


def _async_helper(client: openai.AsyncOpenAI, **kwargs: Any) -> list[Any]:
    async def main() -> list[Any]:
        async with client.chat.completions.stream(model="gpt-4o", messages=MSG, **kwargs) as stream:
            seen = [event.type if event.type != "chunk" else _normal(event.chunk.to_dict()) async for event in stream]
            final = await stream.get_final_completion()
        return [*seen, _normal(final.to_dict())]

    return asyncio.run(main())


PATHS: dict[str, tuple[Callable[..., list[Any]], bool]] = {
    "sync create(stream=True)": (_sync_create, False),
    "sync .stream()": (_sync_helper, False),
    "async create(stream=True)": (_async_create, True),
    "async .stream()": (_async_helper, True),
}


def _client(llm: ScriptedLLM, is_async: bool, **kwargs: Any) -> Any:
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(base_url=llm.openai_base_url, api_key="test", max_retries=kwargs.pop("max_retries", 0), **kwargs)


def _in_run(budget: ob.Budget | None, fn: Callable[[], Any]) -> tuple[ob.Run, Any]:
    with ob.run("streamer", budget=budget) as run:
        seen = fn()
    return run, seen


BUDGETS = {"no budget": None, "max_steps only": ob.Budget(max_steps=10)}


# --- inside any run: exact -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("budget", BUDGETS)
def test_a_stream_in_a_run_without_token_or_money_limits_counts_what_the_server_reported(otel, llm, path, budget):
    fn, is_async = PATHS[path]
    llm.default = REPORTED
    run, _ = _in_run(BUDGETS[budget], lambda: fn(_client(llm, is_async)))
    assert llm.requests[0].body["stream_options"] == {"include_usage": True}  # we asked for it
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (1_234, 56)
    (span,) = otel.chat_spans()
    assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) == (1_234, 56)
    assert ESTIMATED not in span.attributes
    price = PriceBook().lookup("openai", "gpt-4o")
    assert price is not None
    expected = price.cost(1_234, 56)
    assert run.outcome.usage.cost_usd == pytest.approx(expected)
    assert sum(p.value for p in otel.metric_points("otel_budget.cost.usd")) == pytest.approx(expected)


def test_the_wrap_up_of_a_run_stopped_at_its_step_limit_counts_the_reported_stream_usage(otel, llm, oai):
    llm.default = REPORTED
    with ob.run("streamer", budget=ob.Budget(max_steps=1)) as run:
        list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
        with pytest.raises(ob.BudgetExceeded):
            oai.chat.completions.create(model="gpt-4o", messages=MSG)
    assert run.outcome.stop_reason == "steps"
    assert "1,234 input and 56 output tokens" in run.outcome.wrap_up
    assert len(llm.requests) == 1


@pytest.mark.parametrize("path", PATHS)
def test_the_caller_sees_the_stream_as_the_server_sends_it_without_the_option(otel, llm, path):
    fn, is_async = PATHS[path]
    llm.default = Turn(text="alpha beta gamma", tool_calls=[ToolCall("lookup", {"q": "x"}, id="call_1")],
                       input_tokens=300, output_tokens=20)
    outside = fn(_client(llm, is_async))  # no run: the request goes as the caller made it
    run, inside = _in_run(None, lambda: fn(_client(llm, is_async)))
    assert "stream_options" not in llm.requests[0].body and "stream_options" in llm.requests[1].body
    assert len(inside) == len(outside)  # the usage-only chunk never reached the caller
    assert inside == outside  # nor a `usage` field on the other chunks, in content or in the fields set
    assert run.outcome.usage.output_tokens == 20


@pytest.mark.parametrize("path", PATHS)
def test_the_sdk_never_builds_the_usage_only_chunk_only_we_asked_for(otel, llm, path, monkeypatch):
    """Hidden from the caller anyway, it is read from its event: the SDK builds a chunk object only for what the
    caller sees (a chunk object costs about as much as the whole of our per-call work)."""
    fn, is_async = PATHS[path]
    llm.default = REPORTED
    built: list[Any] = []
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    process = cls._process_response_data

    def counting(self: Any, *, data: Any, **kwargs: Any) -> Any:
        built.append(data)
        return process(self, data=data, **kwargs)

    monkeypatch.setattr(cls, "_process_response_data", counting)
    outside = fn(_client(llm, is_async))  # no run: no usage asked for
    built_outside = len(built)
    built.clear()
    run, inside = _in_run(None, lambda: fn(_client(llm, is_async)))
    assert "stream_options" in llm.requests[1].body
    assert inside == outside
    assert [d for d in built if not d.get("choices")] == []  # no usage-only chunk was built
    assert len(built) == built_outside
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (1_234, 56)
    (_, span) = otel.chat_spans()
    assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) == (1_234, 56)
    assert ESTIMATED not in span.attributes


def test_skipping_the_usage_event_leaves_the_sdks_own_decoder_class_as_it_was(otel, llm):
    """The usage-only event is skipped by the stream's own decoder object (its class swapped for one subclass made
    once per decoder class): the SDK's `SSEDecoder` itself is untouched, so streams outside runs and other clients
    decode as before, over thousands of streams."""
    from openai._streaming import SSEDecoder

    from otel_budget.instrumentation.providers import _stream_usage

    decode = SSEDecoder.__dict__["decode"]
    llm.default = Turn(text="a b", input_tokens=7, output_tokens=2, chunks=2)
    client = _client(llm, False)

    def chunks() -> tuple[int, type]:
        stream = client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
        return sum(1 for _ in stream), type(stream._decoder)

    (n, before) = chunks()  # outside a run: no usage asked for, the SDK's decoder
    with ob.run("many streams") as run:
        inside = [chunks() for _ in range(2_000)]
    skipping = _stream_usage._SKIPPING[SSEDecoder]
    assert before is SSEDecoder and skipping.__mro__[1] is SSEDecoder
    assert inside == [(n, skipping)] * 2_000  # each stream's usage-only event skipped by its own decoder
    assert all("stream_options" in r.body for r in llm.requests[1:])
    assert run.outcome.usage.input_tokens == 7 * 2_000
    assert list(_stream_usage._SKIPPING) == [SSEDecoder]
    assert SSEDecoder.__dict__["decode"] is decode
    gc.collect()  # (a subclass made by a thread that lost the race to store it goes with its decoders)
    assert [c for c in SSEDecoder.__subclasses__() if c.__module__ == skipping.__module__] == [skipping]
    assert chunks() == (n, SSEDecoder)  # outside a run again: as before


@pytest.mark.parametrize("path", PATHS)
def test_cached_and_reasoning_tokens_of_the_usage_event_we_asked_for_are_counted(otel, llm, path):
    """The usage-only event we asked for is read from its JSON, never built by the SDK: its token details (cache
    reads, reasoning) count as the SDK's own usage object would give them."""
    fn, is_async = PATHS[path]
    llm.default = Turn(text="one two three four five", input_tokens=1_234, output_tokens=56, chunks=5,
                       cache_read_tokens=1_000, reasoning_tokens=20)
    run, _ = _in_run(None, lambda: fn(_client(llm, is_async)))
    assert llm.requests[0].body["stream_options"] == {"include_usage": True}
    u = run.outcome.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens) == (1_234, 56, 1_000, 20)
    (span,) = otel.chat_spans()
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 1_000
    assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 20
    assert ESTIMATED not in span.attributes


@pytest.mark.parametrize("path", PATHS)
def test_a_usage_only_chunk_before_the_answers_last_is_hidden_and_counted_too(otel, llm, path):
    """The usage-only chunk is looked for among the events after the answer's finish only (the order OpenAI
    sends); a server that sends it earlier still has it hidden from the caller (by the reader) and counted."""
    fn, is_async = PATHS[path]
    llm.default = Turn(text="one two three four five", input_tokens=1_234, output_tokens=56, chunks=5,
                       usage_before_finish=True)
    outside = fn(_client(llm, is_async))
    run, inside = _in_run(None, lambda: fn(_client(llm, is_async)))
    assert "stream_options" in llm.requests[1].body
    assert inside == outside  # no usage-only chunk and no usage field reached the caller
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (1_234, 56)
    (_, span) = otel.chat_spans()
    assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) == (1_234, 56)
    assert ESTIMATED not in span.attributes


def test_a_langchain_openai_stream_in_a_run_without_limits_is_exact_and_unchanged(otel, llm):
    import langchain_openai

    llm.default = Turn(text="one two three", input_tokens=1_234, output_tokens=56)
    model = langchain_openai.ChatOpenAI(model="gpt-4o", base_url=llm.openai_base_url, api_key="test",
                                        max_retries=0, stream_usage=False)
    outside = [c.content for c in model.stream("hi")]
    with ob.run("lc-stream") as run:
        inside = [(c.content, c.usage_metadata) for c in model.stream("hi")]
    assert "stream_options" in llm.requests[1].body
    assert inside == [(text, None) for text in outside]  # LangChain sees no usage it did not ask for
    assert (run.outcome.usage.input_tokens, run.outcome.usage.output_tokens) == (1_234, 56)


# --- outside runs: unchanged, estimate marked --------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_outside_a_run_the_request_is_unchanged_and_an_estimate_is_marked(otel, llm, path):
    fn, is_async = PATHS[path]
    llm.default = REPORTED
    fn(_client(llm, is_async))
    assert "stream_options" not in llm.requests[0].body
    (span,) = otel.chat_spans()
    assert span.attributes[ESTIMATED] is True
    assert span.attributes["gen_ai.usage.output_tokens"] == len(REPORTED.text or "") // 4 + 1  # from the text


def test_outside_a_run_usage_the_caller_asked_for_is_read_and_not_marked(otel, llm, oai):
    llm.default = REPORTED
    chunks = list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 1_234  # not hidden
    (span,) = otel.chat_spans()
    assert span.attributes["gen_ai.usage.input_tokens"] == 1_234
    assert ESTIMATED not in span.attributes


# --- a server that rejects stream_options --------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_server_rejecting_stream_options_gets_the_request_once_more_without_it_and_is_remembered(otel, llm, path):
    fn, is_async = PATHS[path]
    llm.default = REPORTED
    llm.reject_stream_options = True
    open_before = _OPEN.open
    with ob.run("old-server", budget=ob.Budget(max_steps=10, max_seconds=60)) as run:
        first = fn(_client(llm, is_async))
        second = fn(_client(llm, is_async))
    bodies = [r.body for r in llm.requests]
    assert ["stream_options" in b for b in bodies] == [True, False, False]  # one retry, then remembered
    assert bodies[1] == {k: v for k, v in bodies[0].items() if k != "stream_options"}  # the same request
    assert first == second and first  # the caller got its stream both times
    assert run.outcome.stop_reason == "done"
    assert run.outcome.usage.model_calls == 2  # the retry is not a second step
    spans = otel.chat_spans()
    assert len(spans) == 2 and all(s.attributes[ESTIMATED] is True for s in spans)
    assert otel.run_span("old-server").attributes["otel_budget.used.steps"] == 2
    assert _OPEN.open == open_before  # no span left open by the retry


def test_a_remembered_server_is_not_asked_again_in_another_run(otel, llm, oai):
    llm.default = REPORTED
    llm.reject_stream_options = True
    with ob.run("first"):
        list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
    with ob.run("second") as run:
        list(oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
    assert len(llm.requests) == 3
    assert run.outcome.usage.model_calls == 1


def test_a_caller_whose_own_stream_options_are_rejected_gets_the_servers_error(otel, llm, oai):
    llm.default = REPORTED
    llm.reject_stream_options = True
    with pytest.raises(openai.BadRequestError, match="stream_options"), ob.run("asked"):
        oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True, stream_options={"include_usage": True})
    assert len(llm.requests) == 1  # not sent again: the option was the caller's own


def test_another_bad_request_is_not_sent_again(otel, llm, oai):
    llm.default = Turn(status=400, error_message="messages: too many")
    with pytest.raises(openai.BadRequestError), ob.run("bad"):
        oai.chat.completions.create(model="gpt-4o", messages=MSG, stream=True)
    assert len(llm.requests) == 1


def test_the_retry_is_bounded_by_max_seconds(otel, llm):
    llm.default = Turn(text="slow", delay=30)  # the request without stream_options is answered late
    llm.reject_stream_options = True
    client = _client(llm, False, max_retries=0)
    open_before = _OPEN.open
    with ob.run("deadline", budget=ob.Budget(max_seconds=1)) as run:
        with pytest.raises(ob.BudgetExceeded):
            list(client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True))
    assert run.outcome.stop_reason == "time"
    assert len(llm.requests) == 2 and run.outcome.usage.model_calls == 1
    assert _OPEN.open == open_before


def test_the_remembered_servers_are_bounded_across_thousands_of_base_urls():
    from otel_budget.instrumentation.providers import _stream_usage

    urls = [f"http://10.0.{n // 250}.{n % 250}:8000/v1" for n in range(5_000)]
    for url in urls:
        _stream_usage.remember(url)
    assert len(_stream_usage.REJECTED) <= _stream_usage.REMEMBERED_MAX
    assert _stream_usage.rejected(urls[-1])  # the most recent are remembered
    _stream_usage.REJECTED.clear()
