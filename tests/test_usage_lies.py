"""Usage a server reports is not trusted blindly: missing usage is estimated, negative counts as zero, NaN and
infinity never loosen a cap, and a request for n answers reserves n times its output limit."""

from __future__ import annotations

import logging

import pytest

import otel_budget as ob
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "hi"}]
ANSWER = "word " * 200  # 1,000 characters: about 250 tokens


def test_a_chat_answer_without_usage_is_settled_from_its_text(otel, llm, oai):
    llm.default = Turn(text=ANSWER, report_usage=False)
    with ob.run("no-usage") as run:
        reply = oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=500)
    assert reply.usage is None and len(reply.choices[0].message.content) == 1000
    assert run.outcome.usage.output_tokens == 250
    assert run.outcome.usage.input_tokens > 0
    span = otel.chat_spans()[0]
    assert span.attributes["gen_ai.usage.output_tokens"] == 250


def test_a_responses_answer_without_usage_is_settled_from_its_text(otel, llm, oai):
    llm.default = Turn(text=ANSWER, report_usage=False)
    with ob.run("no-usage") as run:
        oai.responses.create(model="gpt-4o", input="hi", max_output_tokens=500)
    assert run.outcome.usage.output_tokens == 250


def test_an_anthropic_answer_without_usage_is_settled_from_its_text(otel, llm, anth):
    llm.default = Turn(text=ANSWER, report_usage=False)
    with ob.run("no-usage") as run:
        anth.messages.create(model="claude-sonnet-4-5", max_tokens=500, messages=MSG)
    assert run.outcome.usage.output_tokens == 250


def test_answers_without_usage_still_stop_at_the_output_cap(otel, llm, oai):
    llm.default = Turn(text=ANSWER, report_usage=False)
    with ob.run("no-usage", budget=ob.Budget(max_output_tokens=1_000)) as run:
        for _ in range(10):
            oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=250)
    assert len(llm.requests) == 4  # 4 x 250 estimated tokens; counted as 0 each, all 10 would be sent
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_negative_usage_counts_as_zero_and_never_refunds(otel, llm, oai, caplog):
    # each answer claims -2M output tokens: -$20 at gpt-4o's $10 per MTok if it were believed
    llm.default = Turn(text="ok", input_tokens=2_000, output_tokens=-2_000_000)
    with caplog.at_level(logging.WARNING, logger="otel_budget"), ob.run(
        "refund", budget=ob.Budget(max_usd=0.10)
    ) as run:
        for _ in range(40):
            oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=100)
    sent = len(llm.requests)
    assert sent < 40
    # each call costs 2,000 x $2.50 / MTok = $0.005 of input, its output counts as zero ("ok": 1 token estimated)
    assert run.outcome.usage.cost_usd == pytest.approx(sent * (0.005 + 1e-5))
    assert run.outcome.usage.cost_usd <= 0.10 + 0.005  # at most one call's input-estimate error over
    assert 0 <= run.outcome.usage.output_tokens <= sent
    assert run.outcome.stop_reason is ob.StopReason.COST
    warnings = [r for r in caplog.records if "makes no sense" in r.getMessage()]
    assert len(warnings) == sent  # once per call
    assert "output_tokens=-2000000" in warnings[0].getMessage()


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("bad_in", "bad_out"), [(NAN, NAN), (INF, NAN), (-INF, NAN)], ids=["nan", "inf", "-inf"])
def test_nan_or_infinite_usage_is_estimated_and_never_loosens_a_cap(otel, llm, oai, bad_in, bad_out):
    # the SDK parses NaN and Infinity; an infinite output count cannot be scripted (the server would cut the text)
    llm.default = Turn(text=ANSWER, input_tokens=bad_in, output_tokens=bad_out)
    with ob.run("nan", budget=ob.Budget(max_output_tokens=1_000, max_usd=1.0)) as run:
        for _ in range(10):
            oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=250)
    assert len(llm.requests) == 4  # estimated from the 1,000-character answers: 250 tokens each
    u = run.outcome.usage
    assert u.output_tokens == 1_000 and u.input_tokens > 0
    assert 0 < u.cost_usd < 1.0
    assert run.outcome.stop_reason is ob.StopReason.TOKENS


def test_nan_usage_in_an_anthropic_stream_is_estimated(otel, llm, anth):
    llm.default = Turn(text=ANSWER, input_tokens=float("nan"), output_tokens=float("nan"))
    with ob.run("nan-stream") as run:
        with anth.messages.stream(model="claude-sonnet-4-5", max_tokens=500, messages=MSG) as stream:
            text = "".join(stream.text_stream)
    assert len(text) == 1000
    assert run.outcome.usage.output_tokens == 250
    assert run.outcome.usage.input_tokens > 0
    assert run.outcome.usage.cost_usd > 0


def test_n_choices_reserve_n_times_the_output_limit(otel, llm, oai):
    llm.default = Turn(text="ok", output_tokens=200)
    with ob.run("n", budget=ob.Budget(max_output_tokens=900)) as run:
        oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=200, n=5)
    assert llm.requests == []  # 5 answers x 200 tokens cannot fit 900
    assert run.outcome.stop_reason is ob.StopReason.TOKENS and run.outcome.limit == "max_output_tokens"
    assert "1,000" in run.outcome.detail


def test_n_choices_that_fit_are_sent(otel, llm, oai):
    llm.default = Turn(text="ok", output_tokens=600)
    with ob.run("n", budget=ob.Budget(max_output_tokens=900)) as run:
        oai.chat.completions.create(model="gpt-4o", messages=MSG, max_tokens=200, n=4)
    assert len(llm.requests) == 1 and llm.requests[0].body["n"] == 4
    assert run.outcome.completed


def test_the_enforcer_shares_the_output_room_among_n_choices(otel, llm, oai):
    llm.default = Turn(text="ok", output_tokens=10)
    with ob.run("n", budget=ob.Budget(max_output_tokens=900)):
        oai.chat.completions.create(model="gpt-4o", messages=MSG, n=3)  # no output limit from the caller
    assert llm.requests[0].body["max_completion_tokens"] == 300


def test_gemini_candidate_count_reserves_that_many_output_limits(otel, llm):
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=llm.base_url))
    llm.default = Turn(text="ok", output_tokens=10)
    config = types.GenerateContentConfig(candidate_count=5, max_output_tokens=200)
    with ob.run("gemini-n", budget=ob.Budget(max_output_tokens=900)) as run:
        client.models.generate_content(model="gemini-2.5-flash", contents="hi", config=config)
    assert llm.requests == []  # 5 candidates x 200 tokens cannot fit 900
    assert run.outcome.stop_reason is ob.StopReason.TOKENS
