"""Confirmed completion: "the model stopped asking for tools" is not "the task is done". `run.complete()`,
`run.incomplete(reason)` and `Budget(confirm_done=True)`, with the real SDKs against ScriptedLLM."""

from __future__ import annotations

import pytest
from _loops import LOOPS, model_requests, script

import otel_budget as ob


@pytest.fixture(params=sorted(LOOPS))
def loop(request, oai, anth):
    client = anth if request.param == "anthropic" else oai
    return lambda tools: LOOPS[request.param](client, tools)


def _pages():
    return {"read_page": lambda page: f"page {page}: 3 invoices"}


def test_confirm_done_without_complete_ends_incomplete(otel, llm, loop):
    script(llm, [("read_page", {"page": 1})], final="All invoices submitted.")
    with ob.run("confirm", budget=ob.Budget(confirm_done=True)) as run:
        loop(_pages())
    out = run.outcome
    assert model_requests(llm) == 2
    assert out.stop_reason is ob.StopReason.INCOMPLETE
    assert not out.completed
    assert out.limit is None
    assert out.wrap_up.startswith("Stopped: the model stopped, but the work is not confirmed done (incomplete).")
    assert "NOT complete" in out.wrap_up and "run.complete()" in out.wrap_up
    assert not out.wrap_up.startswith("Completed")
    assert otel.run_span("confirm").attributes["stop.reason"] == "incomplete"
    runs = otel.metric_points("otel_budget.runs")
    assert [(p.attributes["stop_reason"], p.value) for p in runs] == [("incomplete", 1)]


def test_confirm_done_with_complete_ends_done_and_records_the_evidence(otel, llm, loop):
    script(llm, [("read_page", {"page": 1})])
    with ob.run("confirmed", budget=ob.Budget(confirm_done=True)) as run:
        loop(_pages())
        run.complete(evidence="payment run PR-2026-31")
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert run.outcome.wrap_up.startswith("Completed")
    span = otel.run_span("confirmed")
    assert span.attributes["otel_budget.completion.evidence"] == "payment run PR-2026-31"
    assert span.attributes["stop.reason"] == "done"


def test_incomplete_ends_the_run_incomplete_with_its_reason(otel, llm, oai):
    from _loops import chat_loop

    script(llm, [("read_page", {"page": 1})], final="Done!")
    with ob.run("honest") as run:
        chat_loop(oai, _pages())
        run.incomplete("2 of 17 pages read; the portal logged out")
    out = run.outcome
    assert out.stop_reason is ob.StopReason.INCOMPLETE
    assert out.detail == "2 of 17 pages read; the portal logged out"
    assert "Missing: 2 of 17 pages read; the portal logged out" in out.wrap_up
    assert "NOT complete" in out.wrap_up


def test_without_confirm_done_a_run_still_ends_done(otel, llm, oai):
    from _loops import chat_loop

    script(llm, [("read_page", {"page": 1})])
    with ob.run("plain") as run:
        chat_loop(oai, _pages())
    assert run.outcome.stop_reason is ob.StopReason.DONE


def test_a_limit_stop_is_not_hidden_by_complete(otel, llm, oai):
    from _loops import chat_loop

    script(llm, [("read_page", {"page": p}) for p in range(10)])
    with ob.run("capped", budget=ob.Budget(max_steps=2, confirm_done=True)) as run:
        run.complete(evidence=3)  # confirmed too early: the limit that refused the rest still decides
        chat_loop(oai, _pages())
    assert run.outcome.stop_reason is ob.StopReason.STEPS
    assert model_requests(llm) == 2


def test_incomplete_needs_a_reason(otel):
    with ob.run("bad") as run, pytest.raises(ValueError, match="say in a few words what is not done"):
        run.incomplete("")
