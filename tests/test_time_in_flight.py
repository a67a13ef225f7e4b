"""`max_seconds` bounds a call in flight: the SDK's own retries, its retry sleeps and the reading of a stream.

Real openai and anthropic SDKs, sync and async, against ScriptedLLM. Each test asserts that the run ended
within its deadline plus SLACK (a bound, not a benchmark), with stop reason `time`, that the server saw only
the requests that could start before the deadline, that the call's span ended and its reservation was released.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

import otel_budget as ob
from otel_budget.testing import ScriptedLLM, Turn

MSG = [{"role": "user", "content": "hi"}]
#: What a run may take past its deadline: the gap between two stream events (at most TRICKLE here) and the
#: scheduling noise of a loaded 2-core machine.
SLACK = 0.5
#: Seconds between two events of a trickling stream.
TRICKLE = 0.1


def _client(provider: str, is_async: bool, llm: ScriptedLLM, retries: int) -> Any:
    if provider == "openai":
        cls: Any = openai.AsyncOpenAI if is_async else openai.OpenAI
        return cls(base_url=llm.openai_base_url, api_key="t", max_retries=retries)
    cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
    return cls(base_url=llm.anthropic_base_url, api_key="t", max_retries=retries)


def _create(client: Any, provider: str) -> Any:
    if provider == "openai":
        return client.chat.completions.create(model="gpt-4o", messages=MSG)
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG)


def _timed(is_async: bool, budget: ob.Budget, body: Callable[[], Any]) -> tuple[ob.Run, float]:
    """Run `body` (a coroutine function when is_async) in a run; the run and the seconds it took."""
    start = time.monotonic()
    if is_async:

        async def main() -> ob.Run:
            async with ob.run("in-flight", budget=budget) as run:
                await body()
            return run

        run = asyncio.run(main())
    else:
        with ob.run("in-flight", budget=budget) as run:
            body()
    return run, time.monotonic() - start


def _assert_time_stop(run: ob.Run, elapsed: float, max_seconds: float, otel: Any) -> None:
    assert elapsed <= max_seconds + SLACK, f"took {elapsed:.2f} s for max_seconds={max_seconds}"
    outcome = run.outcome
    assert outcome is not None
    assert (outcome.stop_reason, outcome.limit, outcome.completed) == ("time", "max_seconds", False), outcome
    assert outcome.usage.model_calls == 1
    spans = otel.chat_spans()
    assert len(spans) == 1 and spans[0].end_time is not None
    assert all(abs(v) < 1e-9 for v in run.node.account.reserved.values()), run.node.account.reserved
    assert otel.run_span("in-flight").attributes["stop.reason"] == "time"


BOTH = pytest.mark.parametrize(
    "provider,is_async",
    [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)],
    ids=["openai", "openai-async", "anthropic", "anthropic-async"],
)


@BOTH
def test_sdk_timeout_is_not_retried_past_the_deadline(otel, llm, provider, is_async):
    llm.default = Turn(text="too late", delay=2.0)
    client = _client(provider, is_async, llm, retries=2)
    run, elapsed = _timed(is_async, ob.Budget(max_seconds=1, max_usd=1.0), lambda: _create(client, provider))
    _assert_time_stop(run, elapsed, 1, otel)
    assert len(llm.requests) == 1  # the SDK's two retries were never sent


@BOTH
def test_5xx_retries_stop_when_the_next_one_would_start_after_the_deadline(otel, llm, provider, is_async):
    llm.default = Turn(status=500)
    client = _client(provider, is_async, llm, retries=5)  # backoff 0.5, 1, 2, 4, 8 s: 15 s unbounded
    run, elapsed = _timed(is_async, ob.Budget(max_seconds=1, max_usd=1.0), lambda: _create(client, provider))
    _assert_time_stop(run, elapsed, 1, otel)
    assert 1 <= len(llm.requests) <= 2  # the retry after a 0.5 s wait fits, the one after 1 s more does not


@BOTH
def test_a_retry_gets_only_the_time_left_after_its_wait(otel, llm, provider, is_async):
    # The first answer asks for a 1 s wait; the retry then has about 1 s left, and the server would take 3 s.
    llm.script(Turn(status=503, retry_after=1.0), Turn(text="too late", delay=3.0))
    client = _client(provider, is_async, llm, retries=2)
    run, elapsed = _timed(is_async, ob.Budget(max_seconds=2), lambda: _create(client, provider))
    _assert_time_stop(run, elapsed, 2, otel)
    assert len(llm.requests) == 2


# --- streams that trickle --------------------------------------------------------------------------------


def _read_sync(client: Any, kind: str) -> None:
    if kind == "chat":
        for _ in client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True):
            pass
    elif kind == "chat.stream":
        with client.chat.completions.stream(model="gpt-4o", messages=MSG) as s:
            for _ in s:
                pass
    elif kind == "responses":
        for _ in client.responses.create(model="gpt-4o", input="hi", stream=True):
            pass
    elif kind == "responses.stream":
        with client.responses.stream(model="gpt-4o", input="hi") as s:
            for _ in s:
                pass
    elif kind == "messages":
        for _ in client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG, stream=True):
            pass
    else:
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, messages=MSG) as s:
            for _ in s.text_stream:
                pass


async def _read_async(client: Any, kind: str) -> None:
    if kind == "chat":
        async for _ in await client.chat.completions.create(model="gpt-4o", messages=MSG, stream=True):
            pass
    elif kind == "chat.stream":
        async with client.chat.completions.stream(model="gpt-4o", messages=MSG) as s:
            async for _ in s:
                pass
    elif kind == "responses":
        async for _ in await client.responses.create(model="gpt-4o", input="hi", stream=True):
            pass
    elif kind == "responses.stream":
        async with client.responses.stream(model="gpt-4o", input="hi") as s:
            async for _ in s:
                pass
    elif kind == "messages":
        stream = await client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG, stream=True)
        async for _ in stream:
            pass
    else:
        async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100, messages=MSG) as s:
            async for _ in s.text_stream:
                pass


KINDS = ["chat", "chat.stream", "responses", "responses.stream", "messages", "messages.stream"]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_trickling_stream_ends_at_the_deadline(otel, llm, kind, is_async):
    provider = "anthropic" if kind.startswith("messages") else "openai"

    def body() -> Any:
        client = _client(provider, is_async, llm, retries=0)  # a fresh one per event loop
        return _read_async(client, kind) if is_async else _read_sync(client, kind)

    # Warm up outside any run: a helper's first use builds its models, which would eat into the deadline.
    llm.script(Turn(text="warm"))
    asyncio.run(body()) if is_async else body()
    llm.requests.clear()
    otel.exporter.clear()
    # 60 text events 0.1 s apart: 6 s of answer, each gap far below any read timeout.
    llm.default = Turn(text=" ".join(f"w{i}" for i in range(60)), chunks=60, chunk_delay=TRICKLE,
                       input_tokens=40, output_tokens=60)
    # 2 s: the text begins after the API's first events (4 of them, 0.4 s, for the Responses API) even when
    # the machine is loaded, so there is text to settle with.
    run, elapsed = _timed(is_async, ob.Budget(max_seconds=2, max_usd=1.0), body)
    _assert_time_stop(run, elapsed, 2, otel)
    assert len(llm.requests) == 1
    usage = run.outcome.usage
    assert usage.output_tokens > 0 and usage.cost_usd > 0  # settled with what was seen, not zero
    span = otel.chat_spans()[0]
    assert span.attributes["gen_ai.usage.output_tokens"] == usage.output_tokens


def test_a_stream_whose_server_falls_silent_ends_at_the_read_timeout(otel, llm, oai):
    # The stream's read timeout is the time the run had left when the call was sent.
    llm.default = Turn(text="a b c d", chunks=4, chunk_delay=3.0)  # one event, then silence past the deadline
    run, elapsed = _timed(False, ob.Budget(max_seconds=1), lambda: _read_sync(oai, "chat"))
    _assert_time_stop(run, elapsed, 1, otel)


@pytest.mark.parametrize("kind", ["chat", "messages.stream"])
def test_an_async_stream_does_not_wait_past_the_deadline_for_its_next_event(otel, llm, kind):
    # Events 1.2 s apart: the first comes before the 1.5 s deadline, the second would come 0.9 s after it.
    llm.default = Turn(text="a b c d", chunks=4, chunk_delay=1.2)
    client = _client("anthropic" if kind.startswith("messages") else "openai", True, llm, retries=0)
    run, elapsed = _timed(True, ob.Budget(max_seconds=1.5), lambda: _read_async(client, kind))
    _assert_time_stop(run, elapsed, 1.5, otel)


def test_without_a_time_limit_retries_are_left_to_the_sdk(otel, llm):
    llm.script(Turn(status=500), Turn(status=500), Turn(text="ok"))
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="t", max_retries=2)
    with ob.run("untimed", budget=ob.Budget(max_steps=3)) as run:
        reply = _create(client, "openai")
    assert reply.choices[0].message.content == "ok"
    assert len(llm.requests) == 3
    assert run.outcome.stop_reason == "done"
