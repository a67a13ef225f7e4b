"""Run names are metric labels: thousands of distinct names (a name per request) must not grow the metrics
without bound nor fall silently into the SDK's overflow series. Past the bound, new names are counted as
`_other`, with one warning; the utilization gauge stops reporting a name a while after its last run ended."""

from __future__ import annotations

import logging

from _support import ask

import otel_budget as ob
from otel_budget.core import config
from otel_budget.telemetry.run_names import MAX_RUN_NAMES, ZERO_SECONDS
from otel_budget.testing import Turn

UTILIZATION = "otel_budget.run.utilization"


def _overflowed(points) -> bool:
    return any((p.attributes or {}).get("otel.metric.overflow") for p in points)


def test_thousands_of_run_names_stay_bounded_with_one_warning(otel, llm, oai, caplog):
    names = 3000
    llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with caplog.at_level(logging.WARNING, logger="otel_budget"):
        for i in range(names):
            with ob.run(f"request-{i}", budget=ob.Budget(max_steps=5)):
                if i % 500 == 0:
                    ask(oai)  # a few real calls: their cost carries the run name too
    runs = otel.metric_points("otel_budget.runs")
    labels = {p.attributes["run_name"] for p in runs}
    assert len(labels) == MAX_RUN_NAMES + 1 and "_other" in labels
    assert sum(p.value for p in runs) == names  # every run counted, none lost in an overflow series
    assert next(p.value for p in runs if p.attributes["run_name"] == "_other") == names - MAX_RUN_NAMES
    gauge = otel.metric_points(UTILIZATION)
    assert len(gauge) <= (MAX_RUN_NAMES + 1) * 7
    assert not _overflowed(runs) and not _overflowed(gauge)
    warnings = [r.getMessage() for r in caplog.records if "distinct run names" in r.getMessage()]
    assert len(warnings) == 1 and "per kind of task, never per request" in warnings[0]
    assert len(llm.requests) == 6
    assert {p.attributes['run_name'] for p in otel.metric_points('otel_budget.cost')} <= labels
    spans = otel.spans("invoke_agent request-2999")
    assert len(spans) == 1  # the span keeps the real name


def test_the_gauge_forgets_a_name_after_its_last_run_ended(otel, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(config.get().telemetry.names, "clock", lambda: now[0])
    with ob.run("nightly-report", budget=ob.Budget(max_steps=4)):
        pass
    zeros = [p for p in otel.metric_points(UTILIZATION) if p.attributes["run_name"] == "nightly-report"]
    assert len(zeros) == 7 and {p.value for p in zeros} == {0.0}
    now[0] += ZERO_SECONDS + 1
    assert [p for p in otel.metric_points(UTILIZATION) if p.attributes["run_name"] == "nightly-report"] == []


def test_a_few_names_keep_their_own_series_and_no_warning(otel, llm, oai, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_budget"):
        for i in range(600):
            with ob.run(("triage", "summarize", "invoice")[i % 3], budget=ob.Budget(max_steps=5)):
                pass
    runs = otel.metric_points("otel_budget.runs")
    assert {p.attributes["run_name"]: p.value for p in runs} == {"triage": 200, "summarize": 200, "invoice": 200}
    assert not [r for r in caplog.records if "distinct run names" in r.getMessage()]
