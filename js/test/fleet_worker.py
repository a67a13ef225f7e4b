"""The Python side of js/test/fleet.test.mjs: one run drawing from a shared Scope in Redis, then its outcome.

argv: redis URL, ScriptedLLM's OpenAI base URL, model name, scope name, max_usd, max_steps, calls to attempt.
Prints "ready" once instrumented, waits for a line on stdin ("go"), makes the calls one after another (each
with max_tokens=10) and prints the run's outcome as JSON.
"""

from __future__ import annotations

import json
import sys

import openai

import otel_budget


def main() -> None:
    url, base_url, model, scope, max_usd, max_steps, calls = sys.argv[1:8]
    # a generous timeout: the machine running the tests may be loaded; this test is not about timeouts
    otel_budget.instrument(ledger=otel_budget.RedisLedger(url, fail="closed", socket_timeout=5.0),
                           prices={model: {"input_per_mtok": 0.0, "output_per_mtok": 1200.0}})
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    fleet = otel_budget.Scope(name=scope, max_usd=float(max_usd), max_steps=int(max_steps))
    print("ready", flush=True)
    sys.stdin.readline()
    with otel_budget.run("python-worker", budget=otel_budget.Budget(scope=fleet)) as run:
        for _ in range(int(calls)):
            client.chat.completions.create(model=model, max_tokens=10,
                                           messages=[{"role": "user", "content": "next invoice"}])
    print(json.dumps({"stop_reason": run.outcome.stop_reason, "limit": run.outcome.limit,
                      "model_calls": run.outcome.usage.model_calls}), flush=True)


if __name__ == "__main__":
    main()
