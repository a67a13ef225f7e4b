"""A plain cost-capped loop over the real openai SDK, shared by the limit-pause tests and the child process that
resumes a run paused at a limit from JSON.

Run as a script: `python _limit_agent.py BASE_URL PAUSED_JSON_FILE approve|deny MAX_USD|-` resumes the paused run
against ScriptedLLM (with MAX_USD as the new money cap, `-` for the saved budget) and prints its outcome as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import openai

import otel_budget

MODEL = "acme-pause"
PRICES = {MODEL: otel_budget.Price(input_per_mtok=100.0, output_per_mtok=1000.0)}
"""About $0.11 a call: ~100 input tokens and the 100 output tokens each request allows (and the script writes)."""


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "next invoice"}], max_tokens=100)


def loop(client: openai.OpenAI, run: otel_budget.Run, calls: int = 100) -> None:
    """Ask until the run says stop (a refused call raises BudgetExceeded, which the run catches)."""
    for _ in range(calls):
        if not run.allows():
            return
        ask(client)


def go_on(client: openai.OpenAI, paused: Any, approved: bool, budget: otel_budget.Budget | None) -> otel_budget.Run:
    with otel_budget.resume(paused, approved=approved, budget=budget) as run:
        loop(client, run)
    return run


def main(argv: list[str]) -> int:
    base_url, path, decision, max_usd = argv
    otel_budget.instrument(prices=PRICES)
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    with open(path, encoding="utf-8") as fh:
        paused = otel_budget.PausedRun.model_validate_json(fh.read())
    budget = None if max_usd == "-" else otel_budget.Budget(max_usd=float(max_usd))
    run = go_on(client, paused, decision == "approve", budget)
    assert run.outcome is not None
    print(json.dumps({"outcome": run.outcome.model_dump(mode="json")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
