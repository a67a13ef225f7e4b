"""otel-budget next to the other OpenAI instrumentors (OpenInference, OpenLLMetry, OTel genai-openai), in both
orders: exactly one LLM span per request, ours in content, the budget counted once, and `uninstrument()` in any
order never brings back a wrapper that is no longer ours."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import Turn


def _openinference() -> Any:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _openllmetry() -> Any:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _genai_openai() -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return OpenAIInstrumentor()


PEERS: dict[str, Callable[[], Any]] = {"openinference": _openinference, "openllmetry": _openllmetry,
                                       "genai-openai": _genai_openai}


def _is_llm_span(span: Any) -> bool:
    """As Phoenix reads a span: its OpenInference kind when it has one, else the GenAI operation."""
    attrs = span.attributes or {}
    if "openinference.span.kind" in attrs:
        return attrs["openinference.span.kind"] == "LLM"
    return attrs.get("gen_ai.operation.name") in ("chat", "text_completion")


def _unwrap_peer_leftovers() -> list[str]:
    """Remove the wrappers a peer's `uninstrument()` left on openai's resource classes (OpenLLMetry 0.62 leaves
    all of them with wrapt 2: its unwrap does not recognise wrapt 2's wrappers)."""
    import importlib
    import pkgutil

    import openai.resources
    import wrapt

    proxy = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)
    left = []
    for info in pkgutil.walk_packages(openai.resources.__path__, "openai.resources."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for cls in [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == info.name]:
            for attr, value in list(vars(cls).items()):
                wrapper = getattr(value, "_self_wrapper", None) if isinstance(value, proxy) else None
                if wrapper is not None and getattr(wrapper, "__module__", "").startswith("opentelemetry."):
                    setattr(cls, attr, value.__wrapped__)
                    left.append(f"{cls.__name__}.{attr}")
    return left


@pytest.fixture
def exporter(otel: Any) -> Iterator[Any]:
    """The global in-memory exporter, with nothing instrumented: each test chooses the order."""
    ob.uninstrument()
    otel.exporter.clear()
    yield otel.exporter
    _unwrap_peer_leftovers()


def _both(name: str, peer_first: bool) -> Any:
    peer = PEERS[name]()
    if peer_first:
        peer.instrument()
        ob.instrument()
    else:
        ob.instrument()
        peer.instrument()
    return peer


@pytest.mark.parametrize("peer_first", [True, False], ids=["peer-first", "ours-first"])
@pytest.mark.parametrize("name", list(PEERS))
def test_one_llm_span_per_request_with_another_instrumentor(llm: Any, oai: openai.OpenAI, exporter: Any, name: str,
                                                            peer_first: bool) -> None:
    peer = _both(name, peer_first)
    try:
        # The stream's usage comes unasked (a steps-only run does not add include_usage, issue 16).
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2, stream_usage=True)
        with ob.run("peers", budget=ob.Budget(max_steps=3)) as run:
            ask(oai)
            for _ in oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "s"}],
                                                 stream=True):
                pass
            oai.responses.create(model="gpt-4o", input="r")
            ask(oai)  # refused: max_steps
    finally:
        peer.uninstrument()
        ob.uninstrument()
    calls = 3
    assert len(llm.requests) == calls == run.outcome.usage.model_calls  # the budget counted each call once
    assert run.outcome.stop_reason == "steps"
    spans = exporter.get_finished_spans()
    sent = [s for s in spans if _is_llm_span(s)]
    assert len(sent) == calls, "\n".join(f"{s.name} {s.instrumentation_scope.name}" for s in spans)
    # A refused call is never an LLM span: a peer that opened one outside ours sees it marked as the guardrail.
    refused = [s for s in spans if s.name == "refused chat gpt-4o"]
    assert all(s.attributes["openinference.span.kind"] == "GUARDRAIL" for s in refused)
    assert all(s.attributes["stop.reason"] == "steps" for s in refused)
    (run_span,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent peers"]
    for turn, span in enumerate(sorted(sent, key=lambda s: s.start_time), start=1):
        attrs = span.attributes
        assert span.name == "chat gpt-4o"
        assert attrs["otel_budget.turn"] == turn  # ours in content, whoever opened it
        assert attrs["gen_ai.usage.input_tokens"] == 10
        assert attrs["gen_ai.usage.output_tokens"] == 2
        assert span.parent.span_id == run_span.context.span_id


@pytest.mark.parametrize("name", list(PEERS))
def test_without_otel_budget_the_peer_does_span_the_call(llm: Any, oai: openai.OpenAI, exporter: Any,
                                                         name: str) -> None:
    """The control for the test above: each peer, alone, emits its own LLM span for the same call."""
    peer = PEERS[name]()
    peer.instrument()
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        ask(oai)
    finally:
        peer.uninstrument()
    spans = [s for s in exporter.get_finished_spans() if _is_llm_span(s)]
    assert len(spans) == 1 and spans[0].instrumentation_scope.name != "otel_budget"


@pytest.mark.parametrize("fifo", [True, False], ids=["fifo", "lifo"])
@pytest.mark.parametrize("peer_first", [True, False], ids=["peer-first", "ours-first"])
@pytest.mark.parametrize("name", list(PEERS))
def test_uninstrument_in_any_order_leaves_no_wrapper_that_spans_or_enforces(
    llm: Any, oai: openai.OpenAI, exporter: Any, name: str, peer_first: bool, fifo: bool
) -> None:
    peer = _both(name, peer_first)
    first, second = (peer, ob) if peer_first == fifo else (ob, peer)
    first.uninstrument()
    second.uninstrument()
    _unwrap_peer_leftovers()  # OpenLLMetry 0.62's own unwrap misses wrapt 2 wrappers: do what it meant to
    llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
    with ob.run("after", budget=ob.Budget(max_steps=1)) as after:
        ask(oai)
        ask(oai)
    assert len(llm.requests) == 2  # nothing of ours enforces any more
    assert after.outcome.usage.model_calls == 0
    leftover = [s.name for s in exporter.get_finished_spans() if _is_llm_span(s)]
    assert leftover == []  # nor does the peer's wrapper come back after both were uninstrumented


def test_a_wrapper_over_ours_is_not_clobbered_by_uninstrument_and_ours_passes_through(
    llm: Any, oai: openai.OpenAI, exporter: Any
) -> None:
    import wrapt

    seen: list[str] = []

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append("theirs")
        return wrapped(*args, **kwargs)

    ob.instrument()
    original = openai.OpenAI.__dict__.get("request")
    wrapt.wrap_function_wrapper(openai, "OpenAI.request", theirs)
    installed = openai.OpenAI.__dict__["request"]
    try:
        ob.uninstrument()
        assert openai.OpenAI.__dict__["request"] is installed  # theirs stays where they put it
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        with ob.run("inside", budget=ob.Budget(max_steps=1)) as run:
            ask(oai)
            ask(oai)
        assert seen == ["theirs", "theirs"] and len(llm.requests) == 2
        assert run.outcome.usage.model_calls == 0  # ours, left inside theirs, only passes calls through
    finally:
        if original is None:
            del openai.OpenAI.request
        else:
            openai.OpenAI.request = original


def test_a_peer_scopes_agent_span_around_the_call_is_not_taken_over(llm: Any, oai: openai.OpenAI,
                                                                     exporter: Any) -> None:
    from opentelemetry import trace

    ob.instrument()
    try:
        tracer = trace.get_tracer("opentelemetry.util.genai.handler")  # util-genai also spans agents and tools
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        with tracer.start_as_current_span("invoke_agent writer", attributes={"gen_ai.operation.name": "invoke_agent"}):
            ask(oai)
    finally:
        ob.uninstrument()
    names = {(s.name, s.instrumentation_scope.name) for s in exporter.get_finished_spans()}
    assert names == {("invoke_agent writer", "opentelemetry.util.genai.handler"), ("chat gpt-4o", "otel_budget")}


async def _responses_calls(oai: openai.OpenAI, aoai: openai.AsyncOpenAI) -> None:
    """Every Responses path OpenLLMetry wraps: create, streamed create, the `.stream()` helper, sync and async."""
    oai.responses.create(model="gpt-4o", input="a")
    for _ in oai.responses.create(model="gpt-4o", input="b", stream=True):
        pass
    with oai.responses.stream(model="gpt-4o", input="c") as stream:
        stream.get_final_response()
    await aoai.responses.create(model="gpt-4o", input="d")
    async for _ in await aoai.responses.create(model="gpt-4o", input="e", stream=True):
        pass
    async with aoai.responses.stream(model="gpt-4o", input="f") as astream:
        await astream.get_final_response()


@pytest.mark.parametrize("peer_first", [True, False], ids=["peer-first", "ours-first"])
def test_openllmetry_responses_spans_once_in_both_orders_and_not_for_a_refused_call(
    llm: Any, oai: openai.OpenAI, aoai: openai.AsyncOpenAI, exporter: Any, peer_first: bool
) -> None:
    """OpenLLMetry opens its Responses span only after the call returned: ours stays above its wrapper."""
    import asyncio

    peer = _both("openllmetry", peer_first)
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        with ob.run("responses", budget=ob.Budget(max_steps=6)) as run:
            asyncio.run(_responses_calls(oai, aoai))
            with pytest.raises(ob.BudgetExceeded):  # refused: max_steps, sync and async
                oai.responses.create(model="gpt-4o", input="g")

            async def refused() -> None:
                await aoai.responses.create(model="gpt-4o", input="h")

            with pytest.raises(ob.BudgetExceeded):
                asyncio.run(refused())
    finally:
        peer.uninstrument()
        ob.uninstrument()
    assert len(llm.requests) == 6 == run.outcome.usage.model_calls
    assert run.outcome.stop_reason == "steps"
    spans = exporter.get_finished_spans()
    sent = [s for s in spans if _is_llm_span(s)]
    assert len(sent) == 6, "\n".join(f"{s.name} {s.instrumentation_scope.name}" for s in spans)
    assert {s.instrumentation_scope.name for s in sent} == {"otel_budget"}
    assert sorted(s.attributes["otel_budget.turn"] for s in sent) == [1, 2, 3, 4, 5, 6]
    assert all(s.attributes["gen_ai.usage.input_tokens"] == 10 for s in sent)
    assert [s for s in spans if s.instrumentation_scope.name.startswith("opentelemetry.instrumentation")] == []


def test_openllmetry_alone_spans_the_responses_call(llm: Any, oai: openai.OpenAI, exporter: Any) -> None:
    """The control for the test above: OpenLLMetry alone does span a Responses call (after it returned)."""
    peer = _openllmetry()
    peer.instrument()
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
        oai.responses.create(model="gpt-4o", input="a")
    finally:
        peer.uninstrument()
    spans = [s for s in exporter.get_finished_spans() if _is_llm_span(s)]
    assert [s.instrumentation_scope.name for s in spans] == ["opentelemetry.instrumentation.openai.v1"]
