"""instrument()/uninstrument(): identity restore, idempotence, no double counting, telemetry never breaks calls."""

from __future__ import annotations

import anthropic
import openai
import pytest
from _support import ask
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]


def _attrs() -> dict:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from anthropic import _base_client as ab
    from openai import _base_client as ob_

    attrs = {
        (cls, name): cls.__dict__[name]
        for cls in (ob_.SyncAPIClient, ob_.AsyncAPIClient, ab.SyncAPIClient, ab.AsyncAPIClient)
        for name in ("request",)
    }
    # a run follows the threads and pool tasks it starts (instrumentation/threads.py)
    attrs[(threading.Thread, "start")] = threading.Thread.__dict__["start"]
    attrs[(ThreadPoolExecutor, "submit")] = ThreadPoolExecutor.__dict__["submit"]
    return attrs


def test_uninstrument_restores_every_patched_attribute_by_identity():
    ob.uninstrument()
    before = _attrs()
    ob.instrument()
    patched = _attrs()
    assert all(patched[k] is not before[k] for k in before)
    ob.uninstrument()
    after = _attrs()
    assert all(after[k] is before[k] for k in before)


def test_uninstrument_leaves_nothing_of_ours_behind():
    import wrapt

    ob.instrument()
    ob.uninstrument()
    leftovers = []
    for module in (openai, anthropic):
        for cls in vars(module._base_client).values():
            if isinstance(cls, type):
                leftovers += [n for n, v in vars(cls).items() if isinstance(v, wrapt.FunctionWrapper)]
    assert leftovers == []


def test_instrument_twice_is_instrument_once(llm, oai):
    ob.instrument()
    ob.instrument()
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=1)
        with ob.run("twice") as run:
            ask(oai)
        assert run.outcome.usage.model_calls == 1
        assert run.outcome.usage.input_tokens == 10
    finally:
        ob.uninstrument()
    assert "openai" not in ob.instrumented_libraries()


def test_anthropic_sdk_own_span_is_not_a_second_count(otel, llm):
    # the SDK's own OpenTelemetry spans are on, and the global tracer provider records everything
    client = anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="x", max_retries=0,
                                 open_telemetry={"traces": {"enabled": True}})
    llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
    with ob.run("anthropic-once") as run:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG)
    spans = otel.exporter.get_finished_spans()
    with_tokens = [s for s in spans if "gen_ai.usage.input_tokens" in (s.attributes or {})]
    assert len(with_tokens) == 1
    assert with_tokens[0].instrumentation_scope.name == "otel_budget"
    assert run.outcome.usage.model_calls == 1
    # without otel-budget, the same client does emit its own span: the check above could fail
    ob.uninstrument()
    otel.exporter.clear()
    client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG)
    own = [s.instrumentation_scope.name for s in otel.exporter.get_finished_spans()]
    assert own and "otel_budget" not in own


def test_openinference_and_otel_budget_together_count_budget_once(otel, llm, oai):
    from openinference.instrumentation.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    inst.instrument()
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        with ob.run("both") as run:
            ask(oai)
        assert run.outcome.usage.model_calls == 1
        assert run.outcome.usage.input_tokens == 10
        assert len(otel.chat_spans()) == 1
    finally:
        inst.uninstrument()


def test_unreachable_otlp_exporter_is_harmless(llm, oai):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)))
    ob.instrument(tracer_provider=provider)
    try:
        llm.default = Turn(text="fine", input_tokens=10, output_tokens=1)
        with ob.run("offline", budget=ob.Budget(max_steps=3)) as run:
            reply = ask(oai)
        assert reply.choices[0].message.content == "fine"
        assert run.outcome.completed
        provider.shutdown()  # the failed export stays silent to the caller
    finally:
        ob.uninstrument()


def test_wrapper_bug_lets_the_original_call_through(otel, llm, oai, monkeypatch):
    from otel_budget.instrumentation.providers import openai as adapter

    def broken(self, options, stream):
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(adapter.OpenAIAdapter, "describe", broken)
    llm.default = Turn(text="still works")
    with ob.run("bug") as run:
        assert ask(oai).choices[0].message.content == "still works"
    assert run.outcome.completed


def test_invalid_budget_values_are_rejected_with_a_clear_message():
    from pydantic import ValidationError

    for bad in ({"max_steps": 0}, {"max_usd": -1}, {"near": 1.5}, {"wrap_up": "poem"}, {"max_seconds": 0},
                {"max_stepz": 3}, {"max_input_tokens": 100, "max_total_tokens": 50}):
        with pytest.raises(ValidationError) as err:
            ob.Budget(**bad)
        assert list(bad)[0] in str(err.value) or "max_total_tokens" in str(err.value)
    with pytest.raises(ValidationError):
        ob.Budget(max_steps="many")


def test_budget_is_frozen():
    from pydantic import ValidationError

    budget = ob.Budget(max_steps=5)
    with pytest.raises(ValidationError):
        budget.max_steps = 6  # type: ignore[misc]


def test_content_is_not_recorded_by_default(otel, llm, oai):
    llm.default = Turn(text="SECRET-ANSWER", input_tokens=10, output_tokens=2)

    @ob.tool
    def lookup(account: str) -> str:
        return "SECRET-BALANCE"

    with ob.run("private"):
        ask(oai, "SECRET-PROMPT")
        lookup("SECRET-ACCOUNT")
    blob = repr([dict(s.attributes or {}) for s in otel.exporter.get_finished_spans()])
    for secret in ("SECRET-ANSWER", "SECRET-PROMPT", "SECRET-BALANCE", "SECRET-ACCOUNT"):
        assert secret not in blob


def test_content_is_recorded_when_asked(llm, oai):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ob.instrument(tracer_provider=provider, capture_content=True)
    try:
        llm.default = Turn(text="VISIBLE-ANSWER", input_tokens=10, output_tokens=2)
        with ob.run("open"):
            ask(oai, "VISIBLE-PROMPT")
        attrs = [s for s in exporter.get_finished_spans() if s.name == "chat gpt-4o"][0].attributes
        assert "VISIBLE-PROMPT" in attrs["gen_ai.input.messages"]
        assert "VISIBLE-ANSWER" in attrs["gen_ai.output.messages"]
    finally:
        ob.uninstrument()


@pytest.mark.parametrize("openinference_first", [True, False])
def test_budget_holds_whichever_of_openinference_and_otel_budget_is_instrumented_first(llm, oai, openinference_first):
    from openinference.instrumentation.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    if openinference_first:
        inst.instrument()
        ob.instrument()
    else:
        ob.instrument()
        inst.instrument()
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        with ob.run("order", budget=ob.Budget(max_steps=1)) as run:
            ask(oai)
            ask(oai)
        assert len(llm.requests) == 1
        assert run.outcome.usage.model_calls == 1
        assert run.outcome.stop_reason is ob.StopReason.STEPS
    finally:
        inst.uninstrument()
        ob.uninstrument()
    # whatever another instrumentor left behind, nothing of ours enforces after uninstrument()
    llm.reset()
    llm.default = Turn(text="x")
    with ob.run("after", budget=ob.Budget(max_steps=1)) as after:
        ask(oai)
        ask(oai)
    assert len(llm.requests) == 2
    assert after.outcome.usage.model_calls == 0
