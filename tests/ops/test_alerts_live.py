"""Live end to end: a real Prometheus scrapes an instrumented agent run and fires the shipped alerts.

An agent run (real openai SDK against ScriptedLLM) makes 9 of its 10 allowed steps and pauses; the
OpenTelemetry Prometheus exporter serves its metrics on 127.0.0.1; Prometheus 2.42 scrapes and evaluates
every second with a copy of grafana/prometheus/rules/*.rules.yaml whose `for:` is shortened. The near-cap
alert must fire while the run is paused; after the run stops at its step limit, the stopped-run alert. A run
paused at a limit (`on_limit="pause"`) must show in `otel_budget_runs_awaiting_approval` (not yet in runs_total)
and fire the awaiting alert, which resolves once a person declines it (then it counts once, as `steps`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from openai import OpenAI
from opentelemetry.sdk.trace import TracerProvider

import otel_budget
from otel_budget.testing import ScriptedLLM, Turn

from .contract import RULES_DIR
from .prometheus_server import MetricsEndpoint, PrometheusProcess

RUN_NAME = "live-agent"
PAUSED_RUN_NAME = "live-paused-agent"
WAIT_SECONDS = 60.0


def _rules_with_short_for() -> list[dict[str, Any]]:
    """The shipped rule files, with every `for:` cut to 1s so the test does not wait minutes."""
    docs = []
    for path in sorted(RULES_DIR.glob("*.rules.yaml")):
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "1s"
        docs.append(doc)
    return docs


def _wait_for(prom: PrometheusProcess, what: str, found: Callable[[list[dict[str, Any]]], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    alerts: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        alerts = prom.alerts()
        if found(alerts):
            return
        time.sleep(0.25)
    pytest.fail(f"{what} within {WAIT_SECONDS}s; alerts: {alerts}; prometheus log: {prom.log()}")


def _firing(alerts: list[dict[str, Any]], name: str, **labels: str) -> bool:
    return any(
        a["state"] == "firing"
        and a["labels"]["alertname"] == name
        and all(a["labels"].get(k) == v for k, v in labels.items())
        for a in alerts
    )


def _active(alerts: list[dict[str, Any]], name: str) -> bool:
    return any(a["labels"]["alertname"] == name for a in alerts)


@pytest.fixture
def metrics() -> Iterator[MetricsEndpoint]:
    with MetricsEndpoint() as endpoint:
        otel_budget.instrument(meter_provider=endpoint.meter_provider, tracer_provider=TracerProvider())
        try:
            yield endpoint
        finally:
            otel_budget.uninstrument()


def test_near_cap_alert_fires_while_a_run_is_paused_and_stopped_alert_after_it_stops(
    metrics: MetricsEndpoint,
) -> None:
    resume = threading.Event()
    paused = threading.Event()
    outcomes: list[otel_budget.RunOutcome] = []
    errors: list[BaseException] = []

    with ScriptedLLM() as llm:
        llm.default = Turn(text="working on it", input_tokens=120, output_tokens=30)
        client = OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)

        def agent() -> None:
            try:
                with otel_budget.run(RUN_NAME, budget=otel_budget.Budget(max_steps=10)) as run:
                    for _ in range(9):
                        client.chat.completions.create(
                            model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
                        )
                    paused.set()
                    resume.wait(WAIT_SECONDS)
                    while True:  # the 11th call is refused before it is sent; run() closes the run
                        client.chat.completions.create(
                            model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
                        )
                assert run.outcome is not None
                outcomes.append(run.outcome)
            except BaseException as exc:  # surfaced by the main thread
                errors.append(exc)
            finally:
                paused.set()

        thread = threading.Thread(target=agent, name="live-agent", daemon=True)
        thread.start()
        try:
            assert paused.wait(WAIT_SECONDS) and not errors, errors
            with PrometheusProcess([metrics.target], rules=_rules_with_short_for(), interval="1s") as prom:
                _wait_for(
                    prom,
                    "AgentRunNearCap did not fire for the paused run",
                    lambda a: _firing(a, "AgentRunNearCap", run_name=RUN_NAME, dimension="steps"),
                )
                utilization = prom.query(
                    f'otel_budget_run_utilization{{run_name="{RUN_NAME}", dimension="steps"}}'
                )
                assert [float(s["value"][1]) for s in utilization] == [pytest.approx(0.9)]
                assert not _active(prom.alerts(), "AgentRunStoppedByLimit")

                resume.set()
                thread.join(WAIT_SECONDS)
                assert not thread.is_alive() and not errors, errors
                (outcome,) = outcomes
                assert outcome.stop_reason == otel_budget.StopReason.STEPS
                assert outcome.usage.model_calls == 10

                _wait_for(
                    prom,
                    "AgentRunStoppedByLimit did not fire after the run stopped at max_steps",
                    lambda a: _firing(a, "AgentRunStoppedByLimit", run_name=RUN_NAME, stop_reason="steps"),
                )
                # The run is over: its utilization drops to 0 and the near-cap alert resolves.
                _wait_for(
                    prom, "AgentRunNearCap did not resolve", lambda a: not _active(a, "AgentRunNearCap")
                )
        finally:
            resume.set()
            thread.join(WAIT_SECONDS)


def test_a_run_paused_at_a_limit_is_scraped_as_awaiting_approval_and_fires_the_decision_alert(
    metrics: MetricsEndpoint,
) -> None:
    with ScriptedLLM() as llm:
        llm.default = Turn(text="working on it", input_tokens=120, output_tokens=30)
        client = OpenAI(base_url=llm.openai_base_url, api_key="test", max_retries=0)
        with otel_budget.run(PAUSED_RUN_NAME, budget=otel_budget.Budget(max_steps=2, on_limit="pause")) as run:
            while run.allows():
                client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}])
        assert run.outcome is not None and run.outcome.stop_reason == otel_budget.StopReason.AWAITING_APPROVAL
        assert run.outcome.limit == "max_steps"
        assert len(llm.requests) == 2  # the third call was refused before it was sent

    with PrometheusProcess([metrics.target], rules=_rules_with_short_for(), interval="1s") as prom:
        _wait_for(
            prom,
            "AgentRunAwaitingApproval did not fire for the run paused at max_steps",
            lambda a: _firing(a, "AgentRunAwaitingApproval", run_name=PAUSED_RUN_NAME),
        )
        waiting = prom.query(f'otel_budget_runs_awaiting_approval{{run_name="{PAUSED_RUN_NAME}"}}')
        assert [float(s["value"][1]) for s in waiting] == [1.0]
        # Paused is not finished: no stop reason is counted for it yet.
        assert prom.query(f'otel_budget_runs_total{{run_name="{PAUSED_RUN_NAME}"}}') == []
        (alert,) = [a for a in prom.alerts() if a["labels"]["alertname"] == "AgentRunAwaitingApproval"]
        assert "resume or decline" in alert["annotations"]["summary"]
        assert not _active(prom.alerts(), "AgentRunStoppedByLimit")

        # A person declines: the run ends `steps`, is counted once, waits no more, and the alert resolves.
        with otel_budget.resume(run.outcome.paused, approved=False) as declined:
            pass
        assert declined.outcome.stop_reason == otel_budget.StopReason.STEPS
        _wait_for(prom, "AgentRunAwaitingApproval did not resolve after the decision",
                  lambda a: not _active(a, "AgentRunAwaitingApproval"))
        runs = prom.query(f'otel_budget_runs_total{{run_name="{PAUSED_RUN_NAME}"}}')
        assert [(s["metric"]["stop_reason"], float(s["value"][1])) for s in runs] == [("steps", 1.0)]
        waiting = prom.query(f'otel_budget_runs_awaiting_approval{{run_name="{PAUSED_RUN_NAME}"}}')
        assert [float(s["value"][1]) for s in waiting] == [0.0]
