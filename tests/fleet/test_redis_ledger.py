"""RedisLedger against a real redis-server: atomic reserve/settle, idempotent settles, windows, expiry."""

from __future__ import annotations

import socket
import time

import pytest

from otel_budget import LedgerStore, RedisLedger
from otel_budget.core.ledger import Refusal, Reservation

from .redis_server import CLUSTER_BUS_OFFSET, RedisServer, free_port


def test_redis_ledger_satisfies_the_store_protocol(ledger: RedisLedger) -> None:
    assert isinstance(ledger, LedgerStore)


def test_reserve_refuses_what_does_not_fit_with_the_dimension_and_values(ledger: RedisLedger) -> None:
    first = ledger.reserve("fleet", {"usd": 0.6, "steps": 1.0}, {"usd": 1.0})
    assert isinstance(first, Reservation) and first.enforced
    second = ledger.reserve("fleet", {"usd": 0.6}, {"usd": 1.0})
    assert isinstance(second, Refusal)
    assert (second.dim, second.limit, second.used, second.requested, second.scope) == ("usd", 1.0, 0.6, 0.6, "fleet")


def test_settle_replaces_the_reservation_by_the_actual_usage(ledger: RedisLedger) -> None:
    held = ledger.reserve("fleet", {"usd": 0.5, "output_tokens": 1000.0}, {"usd": 1.0})
    assert isinstance(held, Reservation)
    assert ledger.detail("fleet")["reserved"]["usd"] == pytest.approx(0.5)
    ledger.settle(held, {"usd": 0.125, "output_tokens": 250.0})
    detail = ledger.detail("fleet")
    assert detail["used"]["usd"] == pytest.approx(0.125) and detail["used"]["output_tokens"] == 250
    assert detail["reserved"]["usd"] == 0 and detail["reserved"]["output_tokens"] == 0


def test_a_retried_settle_is_a_no_op(ledger: RedisLedger) -> None:
    held = ledger.reserve("fleet", {"usd": 0.5}, {"usd": 1.0})
    assert isinstance(held, Reservation)
    ledger.settle(held, {"usd": 0.2})
    ledger.settle(held, {"usd": 0.2})
    ledger.release(held)
    assert ledger.read("fleet")["usd"] == pytest.approx(0.2)


def test_settling_an_expired_reservation_adds_the_usage_exactly_once(redis_server: RedisServer, prefix: str) -> None:
    store = RedisLedger(redis_server.url, prefix=prefix, reservation_ttl=0.05)
    held = store.reserve("fleet", {"usd": 0.5}, {"usd": 1.0})
    assert isinstance(held, Reservation)
    deadline = time.monotonic() + 5
    while store.detail("fleet")["reserved"]["usd"] > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.detail("fleet")["reserved"]["usd"] == 0  # expired: nothing to take back
    store.settle(held, {"usd": 0.3})
    store.settle(held, {"usd": 0.3})
    assert store.detail("fleet")["used"]["usd"] == pytest.approx(0.3)
    store.close()


def test_a_charge_without_reservation_just_adds_usage(ledger: RedisLedger) -> None:
    ledger.settle(Reservation("fleet", "", {}), {"usd": 0.25, "tool_calls": 1.0})
    ledger.settle(Reservation("fleet", "", {}), {"usd": 0.25, "tool_calls": 1.0})
    assert ledger.read("fleet")["usd"] == pytest.approx(0.5)
    assert ledger.read("fleet")["tool_calls"] == 2
    assert isinstance(ledger.reserve("fleet", {"usd": 0.6}, {"usd": 1.0}), Refusal)


def test_unlimited_dimensions_are_counted_but_never_refuse(ledger: RedisLedger) -> None:
    held = ledger.reserve("fleet", {"steps": 1.0, "input_tokens": 10_000.0}, {"steps": 5.0})
    assert isinstance(held, Reservation)
    ledger.settle(held, {"steps": 1.0, "input_tokens": 9000.0})
    assert ledger.read("fleet")["input_tokens"] == 9000


def test_scopes_are_independent_and_keys_share_one_hash_tag(ledger: RedisLedger) -> None:
    assert isinstance(ledger.reserve("a", {"steps": 1.0}, {"steps": 1.0}), Reservation)
    assert isinstance(ledger.reserve("b", {"steps": 1.0}, {"steps": 1.0}), Reservation)
    assert isinstance(ledger.reserve("a", {"steps": 1.0}, {"steps": 1.0}), Refusal)
    tags = {key[: key.index("}") + 1] for key in ledger.keys("a")}
    assert tags == {"{" + f"{ledger.prefix}:a" + "}"}


def test_a_window_starts_the_counters_anew(ledger: RedisLedger) -> None:
    window = 2.0  # room for three round trips in one window on a loaded machine
    # start right after a window boundary so the first two reservations share a window
    time.sleep(window - time.time() % window + 0.01)
    for _ in range(2):
        held = ledger.reserve("nightly", {"steps": 1.0}, {"steps": 2.0}, window=window)
        assert isinstance(held, Reservation)
        ledger.settle(held, {"steps": 1.0})
    assert isinstance(ledger.reserve("nightly", {"steps": 1.0}, {"steps": 2.0}, window=window), Refusal)
    time.sleep(window - time.time() % window + 0.01)
    assert ledger.read("nightly")["steps"] == 0
    assert isinstance(ledger.reserve("nightly", {"steps": 1.0}, {"steps": 2.0}, window=window), Reservation)


def test_scripts_are_loaded_again_after_the_server_forgot_them(ledger: RedisLedger) -> None:
    ledger.client.script_flush()
    assert isinstance(ledger.reserve("fleet", {"steps": 1.0}, {"steps": 3.0}), Reservation)


def test_the_password_never_appears_in_messages() -> None:
    store = RedisLedger("redis://user:s3cret@127.0.0.1:1/0", socket_timeout=0.2)
    refusal = store.reserve("fleet", {"steps": 1.0}, {"steps": 3.0})
    assert isinstance(refusal, Refusal)
    assert "s3cret" not in refusal.message and "s3cret" not in repr(store)
    assert "user:***@127.0.0.1:1" in refusal.message


def test_cluster_ports_leave_room_for_the_bus_port() -> None:
    # the kernel hands out ephemeral ports up to 60999; a node on one above 55535 has no bus port (+10000)
    for _ in range(300):
        port = free_port(bus=True)
        assert port + CLUSTER_BUS_OFFSET <= 65535
        with socket.socket() as s:
            s.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))  # free as well


def test_works_on_a_redis_cluster() -> None:
    with RedisServer(cluster=True) as server:
        store = RedisLedger(server.url, cluster=True)
        held = store.reserve("nightly-invoices", {"usd": 0.4}, {"usd": 0.5})
        assert isinstance(held, Reservation)
        assert isinstance(store.reserve("nightly-invoices", {"usd": 0.4}, {"usd": 0.5}), Refusal)
        store.settle(held, {"usd": 0.1})
        assert store.read("nightly-invoices")["usd"] == pytest.approx(0.1)
        store.close()
