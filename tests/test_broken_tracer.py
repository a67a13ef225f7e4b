"""A tracer that fails never breaks the agent's call: its span is lost, the call and its metering are not."""

from __future__ import annotations

from typing import Any

import openai
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]


class _Failing(SpanProcessor):
    """A span processor whose every start raises (a broken exporter pipeline)."""

    def __init__(self) -> None:
        self.starts = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.starts += 1
        raise RuntimeError("the span pipeline is broken")


def test_a_tracer_that_raises_when_a_call_span_is_made_breaks_neither_the_call_nor_the_meter(llm):
    failing = _Failing()
    provider = TracerProvider()
    provider.add_span_processor(failing)
    llm.default = Turn(text="fine", input_tokens=30, output_tokens=3, chunks=2)
    client = openai.OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)
    ob.instrument(tracer_provider=provider)
    try:
        with ob.run("broken-tracer", budget=ob.Budget(max_total_tokens=10_000)) as run:
            answer = client.chat.completions.create(model="gpt-4o", messages=MSG)
            streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="gpt-4o", messages=MSG, stream=True) if c.choices)
    finally:
        ob.uninstrument()
    assert answer.choices[0].message.content == "fine"
    assert streamed == "fine"
    assert len(llm.requests) == 2
    assert run.outcome.usage.model_calls == 2
    assert run.outcome.usage.input_tokens == 60
    assert failing.starts >= 2  # the call spans were attempted
