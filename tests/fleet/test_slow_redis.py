"""A slow Redis: a reserve the client gave up on while Redis still ran it (or ran it later) holds no ghost."""

from __future__ import annotations

import time
from collections.abc import Callable

import openai
import redis

import otel_budget
from otel_budget import Budget, RedisLedger, Scope, StopReason
from otel_budget.core.ledger import Refusal, Reservation
from otel_budget.testing import ScriptedLLM, Turn

from .redis_server import RedisServer
from .slow_redis import DelayProxy, busy, evalsha_seen


def ask(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def wait_for(check: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the condition never became true"
        time.sleep(0.02)


def test_a_reserve_that_timed_out_on_a_busy_redis_is_released_so_the_last_allowed_call_is_sent(
    own_redis: RedisServer, instrumented, llm: ScriptedLLM, oai: openai.OpenAI
) -> None:
    store = RedisLedger(own_redis.url, fail="closed", socket_timeout=0.2, retry_interval=0)
    instrumented(store)
    llm.default = Turn(text="ok", input_tokens=5, output_tokens=5)
    scope = Scope(name="nightly", max_steps=2)
    raw = redis.Redis(port=own_redis.port)
    used_key, held_key, res_key = store.keys("nightly")[:3]
    with otel_budget.run("agent", budget=Budget(scope=scope)) as first:
        ask(oai)  # 1 of the 2 steps
        with busy(own_redis.port, seconds=4.0):
            ask(oai)  # its reserve queues behind the busy script; the client gives up after its socket timeout
    assert first.outcome is not None and first.outcome.stop_reason is StopReason.ERROR
    assert "unreachable (fail='closed')" in first.outcome.detail
    # Redis ran that reserve once it was free again: before anything else, a ghost holds the last step
    wait_for(lambda: raw.hget(held_key, "steps") is not None)
    assert float(raw.hget(held_key, "steps")) == 1.0 and raw.hlen(res_key) == 1
    assert store.pending == 1  # its release waits for the next call
    with otel_budget.run("agent", budget=Budget(scope=scope)) as second:
        ask(oai)  # the last step the cap allows
        ask(oai)
    assert second.outcome is not None and second.outcome.stop_reason is StopReason.STEPS
    assert second.outcome.usage.model_calls == 1
    assert len(llm.requests) == 2
    assert float(raw.hget(used_key, "steps")) == 2.0
    assert raw.hlen(res_key) == 0 and not raw.hget(held_key, "steps")  # no reservation left in Redis
    assert store.pending == 0
    raw.close()
    store.close()


def test_a_release_that_reaches_redis_before_its_delayed_reserve_leaves_no_ghost(own_redis: RedisServer) -> None:
    raw = redis.Redis(port=own_redis.port)
    with DelayProxy(own_redis.port) as proxy:
        store = RedisLedger(proxy.url, fail="closed", socket_timeout=0.2, retry_interval=0)
        warm = store.reserve("fleet", {"steps": 1.0}, {"steps": 1.0})  # loads the scripts
        assert isinstance(warm, Reservation)
        store.release(warm)
        before = proxy.evalsha_forwarded
        proxy.up = 3.0  # what the client sends now reaches Redis 3 s later
        refusal = store.reserve("fleet", {"steps": 1.0}, {"steps": 1.0})
        assert isinstance(refusal, Refusal) and refusal.dim == "ledger"
        proxy.up = 0.0
        assert store.flush() == 0  # the release went through at once ...
        assert proxy.evalsha_forwarded == before + 1  # ... while the reserve was still on its way
        proxy.idle()
        # Redis has run every script the proxy delivered: the late reserve (and its retry) among them
        wait_for(lambda: evalsha_seen(raw) == proxy.evalsha_forwarded)
        assert proxy.evalsha_forwarded >= before + 2
        used_key, held_key, res_key = store.keys("fleet")[:3]
        assert raw.hlen(res_key) == 0 and not raw.hget(held_key, "steps")
        assert isinstance(store.reserve("fleet", {"steps": 1.0}, {"steps": 1.0}), Reservation)  # the cap is free
        store.close()
    raw.close()


def test_a_timed_out_reserve_is_released_exactly_once(own_redis: RedisServer) -> None:
    with DelayProxy(own_redis.port) as proxy:
        store = RedisLedger(proxy.url, fail="open", socket_timeout=0.2, retry_interval=0)
        proxy.down = 1.0  # Redis runs the reserve at once, its reply comes too late
        held = store.reserve("fleet", {"usd": 0.5}, {"usd": 1.0})
        assert isinstance(held, Reservation) and not held.enforced
        proxy.down = 0.0
        proxy.idle()
        store.settle(held, {"usd": 0.25})  # pushes the release first, then the usage (as a charge)
        assert store.flush() == 0
        store.flush()  # nothing left: a second flush changes nothing
        detail = store.detail("fleet")
        assert detail["reserved"]["usd"] == 0 and detail["used"]["usd"] == 0.25
        assert isinstance(store.reserve("fleet", {"usd": 0.75}, {"usd": 1.0}), Reservation)
        store.close()
