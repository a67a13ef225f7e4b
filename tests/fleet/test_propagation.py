"""Run trees across processes: a worker attached with the coordinator's token charges the same tree and
appears in the same trace."""

from __future__ import annotations

import multiprocessing
import time

import openai
import pytest

import otel_budget
from otel_budget import Budget, RedisLedger, Scope, StopReason
from otel_budget.fleet import propagation as prop
from otel_budget.testing import ScriptedLLM, Turn

from .redis_server import RedisServer
from .workers import attached_worker


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_a_worker_process_charges_the_same_tree_and_shares_the_trace(
    redis_server: RedisServer, prefix: str, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    store = RedisLedger(redis_server.url, prefix=prefix)
    fleet = instrumented(store)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with otel_budget.run("coordinator", budget=Budget(max_steps=4)) as run:
        ask(oai)  # 1 of 4 steps
        token = prop.export_run()
        worker = ctx.Process(target=attached_worker, args=(redis_server.url, prefix, llm.openai_base_url, token, 5, out))
        worker.start()
        try:
            report = out.get(timeout=90)
        finally:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
        for _ in range(5):
            ask(oai)  # the worker took 3 steps of the tree: nothing is left
    # the worker could make exactly the 3 calls the coordinator had left, then stopped on steps
    assert report["sent"] == 3 and report["stop"] == "steps" and report["steps"] == 3
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason is StopReason.STEPS
    assert outcome.usage.model_calls == 1 and len(llm.requests) == 4
    assert "shared budget 'run:" in outcome.detail
    assert prop.tree_usage(token)["steps"] == 3
    # one trace: the worker's run span is a child of the coordinator's run span
    coordinator = fleet.spans("invoke_agent coordinator")[0]
    trace_id = format(coordinator.context.trace_id, "032x")
    span_id = format(coordinator.context.span_id, "016x")
    worker_run = next(s for s in report["spans"] if s["name"] == "invoke_agent worker")
    assert worker_run["trace_id"] == trace_id and worker_run["parent"] == span_id
    chats = [s for s in report["spans"] if s["name"].startswith("chat ")]
    assert len(chats) == 3
    assert all(s["trace_id"] == trace_id and s["parent"] == worker_run["span_id"] for s in chats)


def test_the_token_carries_trace_context_remaining_limits_deadline_and_fleet_scopes(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    instrumented(ledger)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    fleet = Scope(name="nightly", max_usd=50.0, window_seconds=86400)
    parent = otel_budget.run("parent", budget=Budget(max_steps=10, max_seconds=60))
    with parent, otel_budget.run("child", budget=Budget(max_steps=5, scope=fleet)):
        ask(oai)
        token = prop.export_run()
        again = prop.export_run()
    assert prop.decode(again)["tree"] == prop.decode(token)["tree"]  # one tree scope per run
    payload = prop.decode(token)
    assert payload["limits"]["steps"] == 4  # the tightest of the chain, minus what was used
    assert payload["tp"].split("-")[1] == parent.outcome.trace_id
    assert 0 < payload["deadline"] - time.time() <= 60
    assert payload["scopes"] == [{"name": "nightly", "limits": {"usd": 50.0}, "window": 86400.0}]
    assert payload["tree"].startswith(f"run:{parent.outcome.trace_id}:")


def test_inject_and_extract_carry_the_token_in_w3c_headers(
    ledger: RedisLedger, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    fleet = instrumented(ledger, secret="s3cret")  # extract() accepts signed tokens only
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    with otel_budget.run("coordinator", budget=Budget(max_steps=3)):
        headers = prop.inject({})
        with otel_budget.run("sibling"):  # stands for the worker; the tree scope is the store's
            pass
    assert headers["traceparent"].startswith("00-") and "otel_budget.run=otb1." in headers["baggage"]
    token = prop.extract({"Traceparent": headers["traceparent"], "Baggage": headers["baggage"]})
    assert token is not None
    with otel_budget.propagation.attach_run(token, name="worker") as worker:
        for _ in range(5):
            ask(oai)
    assert worker.outcome is not None and worker.outcome.usage.model_calls == 3
    assert worker.outcome.stop_reason is StopReason.STEPS
    run_span = fleet.spans("invoke_agent worker")[0]
    assert format(run_span.parent.span_id, "016x") == headers["traceparent"].split("-")[2]
    assert prop.extract({"other": "x"}) is None


def test_a_damaged_token_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not an otel-budget run token"):
        prop.attach_run("hello")
    with pytest.raises(ValueError, match="damaged"):
        prop.attach_run("otb1.@@@@")


def test_export_outside_a_run_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="inside `with otel_budget.run"):
        prop.export_run()
