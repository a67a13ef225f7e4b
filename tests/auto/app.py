"""An app run under `opentelemetry-instrument` by test_opentelemetry_instrument.py: one run, one model call; it
prints one JSON line saying what it saw (which instrumentations loaded, the outcome or the refusal)."""

import json
import os

import openai
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

import otel_budget

out: dict = {"openai_v2_loaded": OpenAIInstrumentor().is_instrumented_by_opentelemetry}
client = openai.OpenAI(base_url=os.environ["APP_LLM_URL"], api_key="offline", max_retries=0)
try:
    with otel_budget.run("auto-app") as run:
        for _ in range(3):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    out["stop_reason"] = run.outcome.stop_reason.value
except ValueError as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
