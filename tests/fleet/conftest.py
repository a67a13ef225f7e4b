"""Fleet fixtures: a real redis-server per session (and one per test that restarts it), a ledger per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget
from otel_budget import RedisLedger

from .redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of this test alone, which the test may stop and start again."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test alone, so tests never see each other's scopes."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def ledger(redis_server: RedisServer, prefix: str) -> Iterator[RedisLedger]:
    store = RedisLedger(redis_server.url, prefix=prefix, reservation_ttl=30)
    yield store
    store.close()


class Fleet(SimpleNamespace):
    exporter: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def spans(self, name_prefix: str = "") -> list:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_prefix)]

    def metric_total(self, name: str) -> float:
        data = self.metrics.get_metrics_data()
        total = 0.0
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        total += sum(p.value for p in m.data.data_points)
        return total


@pytest.fixture
def instrumented() -> Iterator[object]:
    """A function `use(ledger)` that instruments with that ledger and in-memory telemetry; undone after."""
    made: list[Fleet] = []

    def use(store: object, prices: dict | None = None, secret: str | None = None) -> Fleet:
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        otel_budget.instrument(
            tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]), ledger=store,
            prices=prices, secret=secret,
        )
        fleet = Fleet(exporter=exporter, metrics=reader)
        made.append(fleet)
        return fleet

    yield use
    otel_budget.uninstrument()
