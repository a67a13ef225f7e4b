"""The Python side of js/test/tokens.test.mjs: a coordinator that exports a signed run token, or a worker that
attaches to one (a run tree across a Python and a Node process on one Redis).

argv: mode ("coordinate" or "attach"), redis URL, ScriptedLLM's OpenAI base URL, model, secret, then
- coordinate: max_usd. Makes one call, prints the token, waits for a line on stdin, then calls until refused.
- attach: the token. Calls until refused (or refused to attach: prints {"error": ...}).
- pause: max_usd. A run with on_limit="pause" calls until it pauses; prints the paused run's JSON.
- resume: max_usd. Reads a paused run's JSON from stdin, resumes it approved under that max_usd, calls until
  refused (or refused to resume: prints {"error": ...}).
Each call has max_tokens=10. Prints the run's outcome as JSON.
"""

from __future__ import annotations

import json
import sys

import openai

import otel_budget
from otel_budget import propagation


def main() -> None:
    mode, url, base_url, model, secret = sys.argv[1:6]
    otel_budget.instrument(ledger=otel_budget.RedisLedger(url, fail="closed", socket_timeout=5.0), secret=secret,
                           prices={model: {"input_per_mtok": 0.0, "output_per_mtok": 1200.0}})
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)

    def call() -> None:
        client.chat.completions.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "next"}])

    if mode == "pause":
        with otel_budget.run("py-pauser", budget=otel_budget.Budget(max_usd=float(sys.argv[6]), on_limit="pause")) as run:
            run.checkpoint({"language": "python", "ünïcode": 1.5})
            for _ in range(10):
                call()
        print(run.outcome.paused.model_dump_json(), flush=True)
        return
    if mode == "resume":
        text = sys.stdin.readline()
        try:
            resumed = otel_budget.resume(otel_budget.PausedRun.model_validate_json(text), approved=True,
                                         budget=otel_budget.Budget(max_usd=float(sys.argv[6])))
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return
        with resumed as run:
            assert run.state == {"language": "typescript", "ünïcode": 1.5}, run.state
            for _ in range(10):
                call()
    elif mode == "coordinate":
        with otel_budget.run("py-coordinator", budget=otel_budget.Budget(max_usd=float(sys.argv[6]))) as run:
            call()
            print(propagation.export_run(), flush=True)
            sys.stdin.readline()
            for _ in range(10):
                call()
    else:  # attach
        try:
            attached = propagation.attach_run(sys.argv[6], name="py-worker")
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return
        with attached as run:
            for _ in range(10):
                call()
    o = run.outcome
    print(json.dumps({"stop_reason": o.stop_reason, "limit": o.limit, "model_calls": o.usage.model_calls,
                      "cost_usd": o.usage.cost_usd, "detail": o.detail}), flush=True)


if __name__ == "__main__":
    main()
