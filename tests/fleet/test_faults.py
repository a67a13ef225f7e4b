"""Faults: Redis unreachable, slow, restarted; a crashed process's reservations expire; no double charge."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import openai
import pytest

import otel_budget
from otel_budget import Budget, RedisLedger, Scope, StopReason
from otel_budget.core.ledger import Refusal, Reservation
from otel_budget.telemetry import semconv as sc
from otel_budget.testing import ScriptedLLM, Turn

from .redis_server import RedisServer, free_port
from .workers import hold_reservations

SCOPE = Scope(name="nightly", max_steps=100)


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers: a Redis that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(sock.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    stop.set()
    thread.join()
    for c in conns:
        c.close()
    sock.close()


def test_fail_closed_refuses_the_call_with_a_clear_stop(instrumented, llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    store = RedisLedger(f"redis://127.0.0.1:{free_port()}/0", fail="closed")
    fleet = instrumented(store)
    with otel_budget.run("agent", budget=Budget(scope=SCOPE)) as run:
        ask(oai)
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason is StopReason.ERROR
    assert "the shared ledger at redis://127.0.0.1" in outcome.detail
    assert "is unreachable (fail='closed')" in outcome.detail
    assert outcome.wrap_up and len(llm.requests) == 0
    span = fleet.spans("invoke_agent agent")[0]
    assert span.attributes[sc.STOP_REASON] == "error"


def test_a_redis_that_never_answers_is_given_up_after_the_socket_timeout(silent_server: str) -> None:
    store = RedisLedger(silent_server, fail="closed", socket_timeout=0.2)
    refusal = store.reserve("nightly", {"steps": 1.0}, {"steps": 5.0})
    assert isinstance(refusal, Refusal) and refusal.dim == "ledger"
    assert "Timeout" in refusal.message or "timed out" in refusal.message
    # the breaker answers the next calls at once, without waiting for the socket again
    again = store.reserve("nightly", {"steps": 1.0}, {"steps": 5.0})
    assert isinstance(again, Refusal) and "not retried" in again.message
    opened = RedisLedger(silent_server, fail="open", socket_timeout=0.2)
    held = opened.reserve("nightly", {"steps": 1.0}, {"steps": 5.0})
    assert isinstance(held, Reservation) and not held.enforced


def test_fail_open_goes_on_unenforced_and_says_so(instrumented, llm: ScriptedLLM, oai: openai.OpenAI) -> None:
    store = RedisLedger(f"redis://127.0.0.1:{free_port()}/0", fail="open", retry_interval=0)
    fleet = instrumented(store)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    with otel_budget.run("agent", budget=Budget(scope=Scope(name="nightly", max_steps=2))) as run:
        for _ in range(5):
            ask(oai)
    outcome = run.outcome
    assert outcome is not None
    # the local fallback still holds the cap within this process
    assert outcome.stop_reason is StopReason.STEPS and len(llm.requests) == 2
    chats = [s for s in fleet.spans("chat ")]
    assert [s.attributes[sc.LEDGER_ENFORCED] for s in chats] == [False, False]
    assert fleet.spans("invoke_agent agent")[0].attributes[sc.LEDGER_UNENFORCED_CALLS] == 2
    assert fleet.metric_total(sc.METRIC_LEDGER_FAIL_OPEN) == 2
    # their usage waits for Redis, and so do the releases of the three reserves Redis may have run unseen
    assert store.pending == 5


def test_restart_under_fail_closed_refuses_while_down_and_accepts_after(
    own_redis: RedisServer, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    store = RedisLedger(own_redis.url, fail="closed", retry_interval=0)
    instrumented(store)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    with otel_budget.run("agent", budget=Budget(scope=SCOPE)) as run:
        ask(oai)
        own_redis.stop()
        ask(oai)
        ask(oai)
    assert run.outcome is not None and run.outcome.stop_reason is StopReason.ERROR
    assert "unreachable (fail='closed')" in run.outcome.detail
    assert run.outcome.usage.model_calls == 1 and len(llm.requests) == 1
    own_redis.start()
    with otel_budget.run("agent", budget=Budget(scope=SCOPE)) as again:
        ask(oai)
    assert again.outcome is not None and again.outcome.completed
    assert store.read("nightly")["steps"] == 1  # the restarted Redis kept nothing (no persistence) but counts anew


def test_restart_under_fail_open_goes_on_and_pushes_the_usage_after(
    own_redis: RedisServer, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    store = RedisLedger(own_redis.url, fail="open", retry_interval=0)
    fleet = instrumented(store)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    with otel_budget.run("agent", budget=Budget(scope=SCOPE)) as run:
        ask(oai)
        own_redis.stop()
        ask(oai)
        ask(oai)
        own_redis.start()
        ask(oai)
    assert run.outcome is not None and run.outcome.completed and len(llm.requests) == 4
    enforced = [s.attributes[sc.LEDGER_ENFORCED] for s in fleet.spans("chat ")]
    assert enforced == [True, False, False, True]
    assert fleet.metric_total(sc.METRIC_LEDGER_FAIL_OPEN) == 2
    assert store.pending == 0
    assert store.read("nightly")["steps"] == 3  # the two calls made while down, then the last one


def test_a_settle_that_missed_redis_is_applied_once_when_it_is_back(own_redis: RedisServer) -> None:
    store = RedisLedger(own_redis.url, retry_interval=0)
    held = store.reserve("fleet", {"usd": 0.5}, {"usd": 1.0})
    assert isinstance(held, Reservation)
    own_redis.stop()
    store.settle(held, {"usd": 0.2})
    store.settle(held, {"usd": 0.2})  # the caller retried: the same settle id
    assert store.pending == 2
    own_redis.start()
    assert store.flush() == 0
    assert store.flush() == 0
    assert store.read("fleet")["usd"] == pytest.approx(0.2)


def test_reservations_of_a_killed_process_expire(redis_server: RedisServer, prefix: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=hold_reservations, args=(redis_server.url, prefix, "fleet", 4, 0.25, 1.0, 3.0, out))
    proc.start()
    try:
        assert out.get(timeout=60) == 4
        store = RedisLedger(redis_server.url, prefix=prefix)
        assert store.detail("fleet")["reserved"]["usd"] == pytest.approx(1.0)
        assert isinstance(store.reserve("fleet", {"usd": 0.25}, {"usd": 1.0}), Refusal)  # the fleet is full
        os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        # every reservation of the killed process expires: the whole cap fits again
        deadline = time.monotonic() + 15
        result = store.reserve("fleet", {"usd": 1.0}, {"usd": 1.0})
        while isinstance(result, Refusal) and time.monotonic() < deadline:
            time.sleep(0.05)
            result = store.reserve("fleet", {"usd": 1.0}, {"usd": 1.0})
        assert isinstance(result, Reservation)
        detail = store.detail("fleet")
        assert detail["reserved"]["usd"] == pytest.approx(1.0) and detail["used"]["usd"] == 0
        store.close()
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
