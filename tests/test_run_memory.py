"""Memory per run is bounded: a run of 20,000 model calls, each asking for tools with fresh arguments and fresh
call ids and carrying the previous call's results, holds no more of otel_budget's own allocations at the end than
after 1,000 calls. Driven through the call path every provider adapter uses (`calls.begin` reads the request's
tool results, admits; `Guard.finish` records the tool requests), since 20,000 SDK round trips under tracemalloc
take minutes; the SDK paths are the same calls (test_stalls*.py). `@tool` executions are mixed in."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

import otel_budget as ob
from otel_budget.core import calls
from otel_budget.model.call import ModelCall, TokenUsage

CALLS = 20_000
WARM = 1_000
#: The old code kept ~100 bytes a call for ever (call id -> tool name, the result signatures): ~1.9 MB here.
TOLERANCE = 48 * 1024


def _ours(snapshot: tracemalloc.Snapshot) -> int:
    return sum(s.size for s in snapshot.statistics("filename")
               if "/otel_budget/" in s.traceback[0].filename and "/otel_budget/testing/" not in s.traceback[0].filename)


def _call(i: int, previous: list[tuple[str, str]]) -> None:
    """One chat call carrying the results of the previous call's tools, answered with three fresh tool calls."""
    call = ModelCall("openai", "chat", "gpt-4o", 50, False)
    body = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": cid} for cid, _ in previous]},
        *({"role": "tool", "tool_call_id": cid, "content": text} for cid, text in previous),
    ]}
    call.prompt = (body, "messages")
    guard = calls.begin(call, lambda: 400)
    assert guard is not None
    call.usage = TokenUsage(input_tokens=100, output_tokens=10)
    call.tool_calls = [
        ("search", f'{{"q": "item {i}"}}', f"call_{i}_a"),
        ("read", f'{{"id": {i}}}', f"call_{i}_b"),
        (f"tool_{i % 500}", "{}", f"call_{i}_c"),  # many tool names, each used now and then
    ]
    guard.finish()
    previous[:] = [(f"call_{i}_a", f"{i} results: " + "x" * 80), (f"call_{i}_b", "ok"),
                   (f"call_{i}_c", f"document {i} " + "y" * 70)]


@pytest.fixture
def spans_dropped() -> Iterator[None]:
    """Instrumented with real SDK providers that keep nothing (an in-memory exporter would hold every span)."""
    ob.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    yield
    ob.uninstrument()


@pytest.mark.timeout(900)  # tracemalloc slows every allocation down: about 80 s on an idle 2-core machine
def test_a_run_of_20000_calls_with_tools_holds_no_more_memory_than_one_of_1000(spans_dropped) -> None:
    @ob.tool
    def save(item: int) -> str:
        return f"saved item {item} " + "z" * 60

    previous: list[tuple[str, str]] = []
    with ob.run("warm-up"):  # the price table and the like load once per process, before anything is measured
        _call(-1, previous)
    previous.clear()
    tracemalloc.start()
    try:
        with ob.run("long", budget=ob.Budget(max_steps=10 * CALLS, max_tool_calls=10 * CALLS)) as run:
            for i in range(CALLS):
                _call(i, previous)
                if i % 10 == 0:
                    save(i)
                if i == WARM - 1:
                    gc.collect()
                    base = _ours(tracemalloc.take_snapshot())
            gc.collect()
            end = _ours(tracemalloc.take_snapshot())
            progress = run.node.progress
    finally:
        tracemalloc.stop()
    assert run.outcome.stop_reason is ob.StopReason.DONE, run.outcome.detail
    assert run.outcome.usage.model_calls == CALLS
    assert run.outcome.usage.tool_calls == 3 * CALLS + CALLS // 10
    assert end - base < TOLERANCE, f"otel_budget's allocations grew by {end - base:,} bytes"
    assert progress.distinct_count("search") == (256, False)  # past the bound the wrap-up says "at least 256"
