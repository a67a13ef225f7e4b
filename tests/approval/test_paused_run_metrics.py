"""A paused run is not a finished run: `otel_budget_runs_total` counts a run that paused and was resumed once, in
its final stop reason, and `otel_budget_runs_awaiting_approval` shows the runs waiting for a decision now.

Real openai SDK against ScriptedLLM, read with the in-memory metric reader (tests/ops/test_alerts_live.py scrapes
the same numbers with a real Prometheus)."""

from __future__ import annotations

from typing import Any

import otel_budget
from otel_budget import Budget
from otel_budget.testing import Turn

MSG = [{"role": "user", "content": "go"}]


def _runs(otel: Any, name: str) -> dict[str, float]:
    return {p.attributes["stop_reason"]: p.value for p in otel.metric_points("otel_budget.runs")
            if p.attributes["run_name"] == name}


def _awaiting(otel: Any, name: str) -> float:
    return sum(p.value for p in otel.metric_points("otel_budget.runs.awaiting_approval")
               if p.attributes["run_name"] == name)


def _pause_at_steps(oai: Any, name: str) -> otel_budget.Run:
    with otel_budget.run(name, budget=Budget(max_steps=2, on_limit="pause")) as run:
        while run.allows():
            oai.chat.completions.create(model="gpt-4o-mini", messages=MSG)
    assert run.outcome.stop_reason == "awaiting_approval"
    return run


def _go_on(oai: Any, paused: Any, approved: bool, steps: int = 4) -> otel_budget.Run:
    with otel_budget.resume(paused, approved=approved, budget=Budget(max_steps=steps, on_limit="pause")) as run:
        while run.allows():
            oai.chat.completions.create(model="gpt-4o-mini", messages=MSG)
            if run.usage.model_calls >= 3:
                break
    return run


def test_a_paused_run_is_awaiting_now_and_not_yet_a_finished_run(otel, llm, oai):
    llm.default = Turn(text="working")
    _pause_at_steps(oai, "pausing")
    assert _runs(otel, "pausing") == {}
    assert _awaiting(otel, "pausing") == 1


def test_a_run_paused_then_resumed_counts_once_in_its_final_stop_reason(otel, llm, oai):
    llm.default = Turn(text="working")
    first = _pause_at_steps(oai, "resumed")
    run = _go_on(oai, first.outcome.paused, approved=True)
    assert run.outcome.stop_reason == "done"
    assert _runs(otel, "resumed") == {"done": 1}
    assert _awaiting(otel, "resumed") == 0
    declined = _go_on(oai, _pause_at_steps(oai, "declined").outcome.paused, approved=False)
    assert declined.outcome.stop_reason == "steps"
    assert _runs(otel, "declined") == {"steps": 1}
    assert _awaiting(otel, "declined") == 0


def test_a_run_paused_twice_is_awaiting_once_then_counted_once(otel, llm, oai):
    llm.default = Turn(text="working")
    first = _pause_at_steps(oai, "twice")
    again = _go_on(oai, first.outcome.paused, approved=True, steps=2)  # nothing more fits: it pauses again
    assert again.outcome.stop_reason == "awaiting_approval"
    assert _awaiting(otel, "twice") == 1
    assert _runs(otel, "twice") == {}
    last = _go_on(oai, again.outcome.paused, approved=True)
    assert last.outcome.stop_reason == "done"
    assert (_runs(otel, "twice"), _awaiting(otel, "twice")) == ({"done": 1}, 0)


def test_many_runs_pausing_and_resuming_leave_the_gauge_at_the_runs_still_waiting(otel, llm, oai):
    llm.default = Turn(text="working", input_tokens=1, output_tokens=1)
    paused = [_pause_at_steps(oai, "fleet").outcome.paused for _ in range(40)]
    for p in paused[:25]:
        _go_on(oai, p, approved=True)
    assert _awaiting(otel, "fleet") == 15
    assert _runs(otel, "fleet") == {"done": 25}
