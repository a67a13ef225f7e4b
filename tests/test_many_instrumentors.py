"""otel-budget next to two or three other OpenAI instrumentors at once (as `opentelemetry-instrument` loads every
one installed), in every instrument order: one token-bearing LLM span per request, the tokens the server sent
counted once across all spans, none for a refused call, HTTP left unsuppressed, and `uninstrument()` in any
order leaves the peers' wrappers as they would be without us."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import permutations
from typing import Any

import httpx2
import openai
import pytest
from _support import ask
from opentelemetry.instrumentation.utils import is_http_instrumentation_enabled, is_instrumentation_enabled
from test_other_instrumentors import PEERS, _is_llm_span

import otel_budget as ob
from otel_budget.instrumentation._patch import PROXY
from otel_budget.testing import ScriptedLLM, Turn

#: Every order of two or three peers, with ours at every place among them.
SEQUENCES = [(*order[:at], "ours", *order[at:]) for size in (2, 3) for order in permutations(PEERS, size)
             for at in range(size + 1)]


def _ids(sequence: tuple[str, ...]) -> str:
    return ",".join(sequence)


def _instrument(sequence: tuple[str, ...]) -> dict[str, Any]:
    peers = {}
    for name in sequence:
        if name == "ours":
            ob.instrument()
        else:
            peers[name] = PEERS[name]()
            peers[name].instrument()
    return peers


def _uninstrument(sequence: tuple[str, ...], peers: dict[str, Any]) -> None:
    for name in sequence:
        if name == "ours":
            ob.uninstrument()
        elif name in peers:
            peers[name].uninstrument()


class _Probe(httpx2.HTTPTransport):
    """The real transport, noting whether HTTP instrumentation (httpx's, requests') would span each request."""

    def __init__(self, seen: list[bool]) -> None:
        super().__init__()
        self.seen = seen

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(is_http_instrumentation_enabled())
        return super().handle_request(request)


class _AsyncProbe(httpx2.AsyncHTTPTransport):
    def __init__(self, seen: list[bool]) -> None:
        super().__init__()
        self.seen = seen

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(is_http_instrumentation_enabled())
        return await super().handle_async_request(request)


def _tokens(span: Any) -> tuple[int, int]:
    attrs = span.attributes or {}
    return (attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt", 0)),
            attrs.get("gen_ai.usage.output_tokens", attrs.get("llm.token_count.completion", 0)))


def _requests(oai: openai.OpenAI, aoai: openai.AsyncOpenAI) -> int:
    """Every way in that a peer wraps: create, parse, a stream, the Responses API, async; returns how many."""
    ask(oai)
    oai.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": "p"}])
    for _ in oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "s"}], stream=True):
        pass
    # genai-openai detaches its span's context at the stream's end, back to the one it found under our gate: what
    # the caller is left with suppresses nothing
    assert is_instrumentation_enabled()
    oai.responses.create(model="gpt-4o", input="r")

    async def more() -> None:
        await aoai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
        await aoai.responses.create(model="gpt-4o", input="b")

    asyncio.run(more())
    return 6


def _chain(owner: Any, name: str) -> tuple[str, ...]:
    """The wrappers an attribute holds, outermost first: "ours", or their wrapper function's module."""
    found = []
    value = owner.__dict__.get(name)
    while isinstance(value, PROXY):
        wrapper = getattr(value, "_self_wrapper", None)
        ours = hasattr(wrapper, "otel_budget_generation")
        found.append("ours" if ours else getattr(wrapper, "__module__", None) or type(wrapper).__module__)
        value = value.__wrapped__
    return tuple(found)


def _chains() -> dict[str, tuple[str, ...]]:
    import openai.resources.chat.completions as chat
    import openai.resources.responses as responses

    owners = [chat.Completions, chat.AsyncCompletions, responses.Responses, responses.AsyncResponses,
              openai.OpenAI, openai.AsyncOpenAI]
    return {f"{o.__name__}.{m}": _chain(o, m) for o in owners for m in ("create", "parse", "request")
            if m in o.__dict__}


def _strip() -> None:
    """Take every leftover wrapper off: OpenLLMetry 0.62's unwrap leaves its own; a peer's unwrap takes off whichever
    wrapper is on top, another peer's included; OpenInference puts back `OpenAI.request` as it read it (then
    inherited), as the subclass's own."""
    import openai.resources.chat.completions as chat
    import openai.resources.responses as responses

    for owner in (chat.Completions, chat.AsyncCompletions, responses.Responses, responses.AsyncResponses):
        for name in ("create", "parse"):
            while isinstance(owner.__dict__.get(name), PROXY):
                setattr(owner, name, owner.__dict__[name].__wrapped__)
    for owner in (openai.OpenAI, openai.AsyncOpenAI):
        if "request" in owner.__dict__:
            delattr(owner, "request")


@pytest.fixture
def stripped() -> Iterator[None]:
    ob.uninstrument()
    _strip()
    yield
    ob.uninstrument()
    _strip()


@pytest.fixture
def exporter(otel: Any) -> Any:
    """The global in-memory exporter, with nothing instrumented: each test chooses the order."""
    ob.uninstrument()
    otel.exporter.clear()
    return otel.exporter


@pytest.mark.parametrize("sequence", SEQUENCES, ids=_ids)
def test_one_token_bearing_llm_span_per_request_with_several_instrumentors(stripped: None, llm: ScriptedLLM,
                                                                          exporter: Any, sequence: tuple[str, ...]
                                                                          ) -> None:
    seen: list[bool] = []
    oai = openai.OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0,
                        http_client=httpx2.Client(transport=_Probe(seen)))
    aoai = openai.AsyncOpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0,
                              http_client=httpx2.AsyncClient(transport=_AsyncProbe(seen)))
    peers = _instrument(sequence)
    try:
        llm.default = Turn(text="x", input_tokens=10, output_tokens=2, stream_usage=True)
        with ob.run("peers", budget=ob.Budget(max_steps=6)) as run:
            calls = _requests(oai, aoai)
            with pytest.raises(ob.BudgetExceeded):  # refused: max_steps, sync and async
                ask(oai)

            async def refused() -> None:
                await aoai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "r"}])

            with pytest.raises(ob.BudgetExceeded):
                asyncio.run(refused())
    finally:
        _uninstrument(sequence[::-1], peers)
    assert len(llm.requests) == calls == run.outcome.usage.model_calls  # the budget counted each call once
    spans = exporter.get_finished_spans()
    listing = "\n".join(f"{s.name} {s.instrumentation_scope.name} {_tokens(s)}" for s in spans)
    sent = [s for s in spans if _is_llm_span(s)]
    assert len(sent) == calls, listing  # one LLM span per request, none for the refused ones
    assert sorted(s.attributes["otel_budget.turn"] for s in sent) == list(range(1, calls + 1))  # ours in content
    # Phoenix sums the tokens of LLM spans: what the server sent, once; no other span but the run's carries any.
    assert [_tokens(s) for s in sent] == [(10, 2)] * calls, listing
    (run_span,) = [s for s in spans if s.name == "invoke_agent peers"]
    assert [s.name for s in spans if s not in sent and s is not run_span and _tokens(s) != (0, 0)] == []
    refused = [s for s in spans if s.name.startswith("refused ")]
    assert all(s.attributes["openinference.span.kind"] == "GUARDRAIL" for s in refused), listing
    # The HTTP requests themselves are not suppressed, unless OpenInference sits inside ours (instrumented first):
    # the key that quiets it holds down to the transport, as it has no way back to us in between.
    if not ("openinference" in sequence and sequence.index("openinference") < sequence.index("ours")):
        assert seen == [True] * calls


@pytest.mark.parametrize("fifo", [True, False], ids=["fifo", "lifo"])
@pytest.mark.parametrize("sequence", SEQUENCES, ids=_ids)
def test_uninstrument_in_any_order_leaves_the_peers_wrappers_as_without_us(
        llm: ScriptedLLM, oai: openai.OpenAI, stripped: None, sequence: tuple[str, ...], fifo: bool) -> None:
    without_us = tuple(name for name in sequence if name != "ours")
    order = sequence if fifo else sequence[::-1]
    _uninstrument(order, _instrument(without_us))
    control = _chains()
    _strip()
    _uninstrument(order, _instrument(sequence))
    # OpenInference's uninstrument puts back `OpenAI.request` as it read it: ours, when we came first (left inside,
    # ours passes calls through). Every other attribute is as the peers alone leave it, with nothing of ours.
    after = {attr: chain for attr, chain in _chains().items() if not attr.endswith(".request")}
    assert after == {attr: chain for attr, chain in control.items() if not attr.endswith(".request")}
    assert not any("ours" in chain for chain in after.values())
    llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
    with ob.run("after", budget=ob.Budget(max_steps=1)) as after:
        ask(oai)
        ask(oai)
    assert len(llm.requests) == 2 and after.outcome.usage.model_calls == 0  # nothing of ours enforces any more


@pytest.mark.parametrize("sequence", SEQUENCES, ids=_ids)
def test_our_gates_stay_on_top_of_every_peer_wrapper(stripped: None, sequence: tuple[str, ...]) -> None:
    peers = _instrument(sequence)
    try:
        gated = {attr: chain for attr, chain in _chains().items() if not attr.endswith(".request") and chain}
        assert gated and all(chain[0] == "ours" and chain.count("ours") == 1 for chain in gated.values()), gated
    finally:
        _uninstrument(sequence[::-1], peers)
