"""Whether otel-budget's per-call overhead grows with a run: turns 1-100 against turns 9,901-10,000 of one
budgeted run, each stretch in chunks of metered calls alternated with bare calls at the same point."""

from __future__ import annotations

import statistics
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from peers import BUDGET
from workload import _COMPLETION, MESSAGES, MODEL, call_plain, make_client, timed

import otel_budget
from otel_budget.core.calls import in_call


def _bare(client: Any) -> None:
    """The bare SDK inside the run: sent as a nested call, which our wrapper passes straight through."""
    token = in_call().set(True)
    try:
        call_plain(client)
    finally:
        in_call().reset(token)


def stretches(length: int, window: int = 100, chunk: int = 10) -> list[tuple[int, int, float]]:
    """(first turn, last turn, median overhead in us per call) of the first and the last `window` turns."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    client = make_client()
    out = []
    otel_budget.instrument(tracer_provider=tp)
    try:
        with otel_budget.run("bench-warm-up", budget=BUDGET):  # first-call costs of the process, not of a run
            for _ in range(5):
                call_plain(client)
        with otel_budget.run("bench-flat", budget=BUDGET) as run:
            for first in (1, length - window + 1):
                while run.node.turns < first - 1:
                    call_plain(client)
                    if run.node.turns % 1000 == 0:
                        exporter.clear()
                over = []
                for _ in range(window // chunk):
                    over.append(timed(call_plain, client, chunk) - timed(_bare, client, chunk))
                exporter.clear()
                out.append((first, run.node.turns, statistics.median(over)))
    finally:
        otel_budget.uninstrument()
    return out


def wrapper_alone(marks: tuple[int, ...] = (1, 100, 10_000, 100_000), window: int = 200, reps: int = 15
                  ) -> list[tuple[int, float]]:
    """The wrapper alone (the SDK's `request` replaced by a function returning a parsed completion) at turns
    1, 100, 10,000 and 100,000 of one budgeted run: a precise check that nothing grows with the run."""
    from openai._models import FinalRequestOptions
    from openai.types.chat import ChatCompletion

    from otel_budget.instrumentation.providers._request import sync_wrapper
    from otel_budget.instrumentation.providers.openai import OpenAIAdapter

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    result = ChatCompletion.model_validate_json(_COMPLETION)
    options = FinalRequestOptions.construct(  # type: ignore[attr-defined]
        method="post", url="/chat/completions", json_data={"model": MODEL, "messages": MESSAGES}
    )
    wrapper = sync_wrapper(OpenAIAdapter())

    def one(_: Any = None) -> None:
        wrapper(lambda *a, **k: result, None, (ChatCompletion, options), {})

    out = []
    otel_budget.instrument(tracer_provider=tp)
    try:
        with otel_budget.run("bench-wrapper", budget=BUDGET) as run:
            for mark in (m for m in marks if m <= max(marks)):
                while run.node.turns < mark - 1:
                    one()
                    if run.node.turns % 1000 == 0:
                        exporter.clear()
                samples = []
                for _ in range(reps):
                    samples.append(timed(one, None, window))  # type: ignore[arg-type]
                    exporter.clear()
                out.append((mark, statistics.median(samples)))
    finally:
        otel_budget.uninstrument()
    return out
