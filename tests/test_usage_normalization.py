"""Usage follows the GenAI conventions: input includes cached tokens, output includes reasoning tokens."""

from __future__ import annotations

import pytest
from _support import ask

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]


def test_openai_cached_and_reasoning_tokens(otel_oi, llm, oai):
    llm.default = Turn(text="x", input_tokens=1000, cache_read_tokens=800, output_tokens=50, reasoning_tokens=30)
    with ob.run("cache") as run:
        ask(oai)
    u = run.outcome.usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens) == (1000, 800, 50, 30)
    span = otel_oi.chat_spans()[0]
    assert span.attributes["gen_ai.usage.input_tokens"] == 1000
    assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 800
    assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 30
    assert span.attributes["llm.token_count.prompt_details.cache_read"] == 800
    # gpt-4o: 200 fresh x $2.50 + 800 cached x $1.25 + 50 out x $10, per MTok
    assert span.attributes["otel_budget.cost.usd"] == pytest.approx((200 * 2.5 + 800 * 1.25 + 50 * 10) / 1e6)


def test_anthropic_input_tokens_include_cache_reads_and_writes(otel_oi, llm, anth):
    llm.default = Turn(text="x", input_tokens=1000, cache_read_tokens=600, cache_write_tokens=300, output_tokens=20)
    with ob.run("cache") as run:
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG)
    assert llm.requests  # the wire said input_tokens=100 (exclusive); we report the inclusive 1000
    u = run.outcome.usage
    assert (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (1000, 600, 300)
    span = otel_oi.chat_spans()[0]
    assert span.attributes["gen_ai.usage.input_tokens"] == 1000
    assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == 300  # the released name by default
    assert "gen_ai.usage.cache_write.input_tokens" not in span.attributes
    assert span.attributes["llm.token_count.prompt_details.cache_write"] == 300
    expected = (100 * 3.0 + 600 * 0.3 + 300 * 3.75 + 20 * 15.0) / 1e6
    assert span.attributes["otel_budget.cost.usd"] == pytest.approx(expected)


def test_call_span_names_and_semantic_attributes(otel_oi, llm, oai, anth):
    llm.default = Turn(text="x", input_tokens=10, output_tokens=2)
    with ob.run("names"):
        ask(oai)
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=MSG)
    names = sorted(s.name for s in otel_oi.chat_spans())
    assert names == ["chat claude-sonnet-4-5", "chat gpt-4o"]
    for span in otel_oi.chat_spans():
        a = span.attributes
        assert span.kind.name == "CLIENT"
        assert a["openinference.span.kind"] == "LLM"
        assert a["gen_ai.provider.name"] in ("openai", "anthropic")
        assert a["llm.provider"] == a["gen_ai.provider.name"]
        assert a["llm.token_count.total"] == 12
        assert a["gen_ai.response.id"]
        assert a["otel_budget.cost.source"] == "priced"


def test_raw_response_calls_are_counted(otel, llm, oai):
    llm.default = Turn(text="x", input_tokens=40, output_tokens=3)
    with ob.run("raw") as run:
        raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSG)
        assert raw.parse().choices[0].message.content == "x"
        oai.responses.with_raw_response.create(model="gpt-4o", input="hi").parse()
    assert run.outcome.usage.model_calls == 2
    assert run.outcome.usage.input_tokens == 80
    assert run.outcome.usage.output_tokens == 6
