"""Messages a person reads: money shown as precisely as its cap, plurals, one number format, a readable
outcome, and errors that list what is valid."""

from __future__ import annotations

import re

import pytest

import otel_budget
from otel_budget.testing import Turn


def test_a_small_money_cap_is_shown_as_it_was_set(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=300, output_tokens=100)
    with otel_budget.run("tiny", budget=otel_budget.Budget(max_usd=0.005)) as run:
        for _ in range(10):
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                        max_completion_tokens=100)
    text = run.outcome.wrap_up
    assert re.search(r"max_usd \(\$0\.00\d+ of \$0\.005 USD used\)", text), text
    assert "$0.01 " not in text


def test_one_call_is_one_model_call_and_the_outcome_reads_as_a_sentence(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=30000, output_tokens=10)
    with otel_budget.run("once", budget=otel_budget.Budget(max_steps=1, max_total_tokens=45000)) as run:
        for _ in range(3):
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                        max_completion_tokens=10)
    out = run.outcome
    assert "Done so far: 1 model call," in out.wrap_up and "1 model calls," not in out.wrap_up
    # gpt-4o: 30,000 input tokens at $2.50/M and 10 output tokens at $10/M
    assert str(out) == f"once: steps (max_steps); 1 model call, 0 tool calls, 30,010 tokens, $0.0751, {out.usage.seconds:.1f} s"
    assert "e+" not in out.wrap_up and "e+" not in out.detail


def test_large_numbers_in_a_refusal_use_thousands_separators(otel, llm, oai):
    llm.default = Turn(text="ok", input_tokens=29290, output_tokens=10)
    with otel_budget.run("big", budget=otel_budget.Budget(max_total_tokens=31298)) as run:
        for _ in range(3):
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x" * 4000}],
                                        max_completion_tokens=10)
    assert "31,298" in run.outcome.detail and "e+0" not in run.outcome.detail


def test_stop_with_an_unknown_reason_lists_the_valid_ones(otel):
    with otel_budget.run("giving-up") as run:
        with pytest.raises(ValueError, match="not a stop reason; use one of done, steps, .*cancelled"):
            run.stop("give up")
        run.stop("cancelled", detail="the user gave up")
    assert run.outcome.stop_reason is otel_budget.StopReason.CANCELLED


@pytest.mark.parametrize("given", ["not json", '{"run_name": 3}', {"nope": 1}])
def test_resume_with_something_that_is_not_a_paused_run(given):
    with pytest.raises(ValueError, match=r"resume\(\) needs the paused run: run.outcome.paused, or its JSON"):
        otel_budget.resume(given, approved=True)
