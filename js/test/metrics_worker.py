"""The Python side of js/test/metrics.test.mjs: the metric instruments Python records for one scenario.

argv: ScriptedLLM's OpenAI base URL, an unreachable redis URL. One run ("meter", max_usd 1 and near 0.001, a
shared scope on the unreachable Redis with fail="open") makes one priced call; a second run ("meter-stop",
max_steps 1) is refused its second call. Prints {metric name: {unit, description, attributes: [sorted keys of
each point]}} as JSON, for the TypeScript suite to compare with its own.
"""

from __future__ import annotations

import json
import sys

import openai
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import otel_budget


def main() -> None:
    base_url, redis_url = sys.argv[1:3]
    reader = InMemoryMetricReader()
    otel_budget.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]),
                           ledger=otel_budget.RedisLedger(redis_url, fail="open"),
                           prices={"gpt-4o": {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}})
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    scope = otel_budget.Scope(name="meter-scope", max_usd=5.0)
    with otel_budget.run("meter", budget=otel_budget.Budget(max_usd=1.0, near=0.001, scope=scope)):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with otel_budget.run("meter-stop", budget=otel_budget.Budget(max_steps=1)):
        for _ in range(2):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    out: dict[str, dict[str, object]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points = [sorted(p.attributes or {}) for p in metric.data.data_points]
                out[metric.name] = {"unit": metric.unit, "description": metric.description,
                                    "attributes": sorted(points)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
