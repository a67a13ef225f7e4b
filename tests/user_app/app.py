"""A user's own app: the openai SDK and otel-budget, nothing else. Run as a separate process by the tests.

argv[1] is how otel-budget is set up: "instrument" (calls otel_budget.instrument()), "zero-code" (relies on
`opentelemetry-instrument`), "none" (never calls instrument()), "own-provider" (sets its own SDK provider first).
It makes 5 model calls in one run (its budget comes from OTEL_BUDGET_DEFAULT unless APP_MAX_STEPS is set) and
prints one JSON line: the outcome and what it saw.
"""

import json
import logging
import os
import sys

import openai

import otel_budget

mode = sys.argv[1]
if os.environ.get("APP_LOG"):
    logging.basicConfig(level=os.environ["APP_LOG"])
spans = None
if mode == "own-provider":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
if mode in ("instrument", "own-provider"):
    otel_budget.instrument()

client = openai.OpenAI(base_url=os.environ["APP_LLM_URL"], api_key="offline", max_retries=0)
steps = os.environ.get("APP_MAX_STEPS")
budget = otel_budget.Budget(max_steps=int(steps)) if steps else None
with otel_budget.run("user-app", budget=budget) as run:
    for _ in range(5):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
assert run.outcome is not None
print(json.dumps({
    "stop_reason": run.outcome.stop_reason.value,
    "model_calls": run.outcome.usage.model_calls,
    "instrumented": otel_budget.instrumented_libraries(),
    "own_spans": None if spans is None else [s.name for s in spans.get_finished_spans()],
}))
