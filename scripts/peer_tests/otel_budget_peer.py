"""pytest plugin (`-p otel_budget_peer`): run a peer's own test suite with otel-budget active.

`OTEL_BUDGET_PEER=trace`: `otel_budget.instrument()` at `pytest_configure`, spans and metrics to in-memory
exporters (never the global providers, which some suites set themselves). `OTEL_BUDGET_PEER=run`: the same, and
every test body runs inside an `otel_budget.run` with a budget that never stops a test (see `GENEROUS`).
`OTEL_BUDGET_PEER=money`: the same with a money cap too (see `MONEY`), so every call is priced and admitted on its
input estimate and every chat stream gets the `include_usage` we add (and hide) inside runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

#: A budget that limits a dimension (so every call is admitted, reserved and settled by the ledger) and never
#: stops a test: a huge step cap only. No token or money cap (those would add `include_usage` to streams, an
#: output limit to requests and an input estimate), no `max_seconds` (it would lower the SDK timeout), and the
#: repetition and stall checks off (a peer's tests repeat the same tool call on purpose).
GENEROUS: dict[str, Any] = {"max_steps": 1_000_000, "max_repeats": None, "max_stalls": None}

#: `GENEROUS` with a money cap that no test reaches. The enforcer's own output limit is off (`auto_max_tokens`): the
#: pass proves the rewrites a capped run makes of every call transparent, not the SDK's handling of a limit it never
#: asked for. Models without a known price get a flat one (a cap would refuse them: see `_price_every_model`).
MONEY: dict[str, Any] = {**GENEROUS, "max_usd": 1e9, "auto_max_tokens": False}
_BUDGETS = {"run": GENEROUS, "money": MONEY}

_state: dict[str, Any] = {"spans": 0, "calls": 0, "in_run": 0}


def _mode() -> str:
    return os.environ.get("OTEL_BUDGET_PEER", "trace")


def pytest_configure(config: pytest.Config) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_budget

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    otel_budget.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    _state["exporter"] = exporter
    fields = otel_budget.Budget.model_fields  # `max_stalls` is newer than some versions of the package
    chosen = _BUDGETS.get(_mode())
    _state["budget"] = otel_budget.Budget(**{k: v for k, v in chosen.items() if k in fields}) if chosen else None
    if _mode() == "money":
        _price_every_model()


def _price_every_model() -> None:
    """A peer's tests name models nobody prices ("gpt-test", "string"): under a money cap those calls would not be
    sent (UnknownPriceError). Give them a flat price; known models keep theirs."""
    import otel_budget
    from otel_budget.core import config
    from otel_budget.core.pricing import ModelPricing, PriceBook

    flat = ModelPricing(otel_budget.Price(input_per_mtok=1.0, output_per_mtok=1.0))

    class EveryModelPriced(PriceBook):
        def lookup(self, provider: str, model: str) -> ModelPricing | None:
            return super().lookup(provider, model) or flat

    config.get().prices = EveryModelPriced()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    budget = _state.get("budget")
    if budget is None:
        yield
        return
    import otel_budget

    with otel_budget.run("peer-test", budget=budget):
        yield


def pytest_runtest_teardown(item: pytest.Item) -> None:
    exporter = _state.get("exporter")
    if exporter is None:
        return
    spans = exporter.get_finished_spans()
    exporter.clear()
    runs = {s.context.trace_id for s in spans if s.name == "invoke_agent peer-test"}
    calls = [s for s in spans if s.kind.name == "CLIENT" and s.instrumentation_scope.name.startswith("otel_budget")]
    _state["spans"] += len(spans)
    _state["calls"] += len(calls)
    _state["in_run"] += sum(1 for s in calls if s.context.trace_id in runs)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"otel-budget ({_mode()}): active; this process recorded {_state['spans']} spans, {_state['calls']} of them "
        f"model calls ({_state['in_run']} inside a test's run)"
    )
