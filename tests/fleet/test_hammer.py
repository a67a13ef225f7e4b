"""8 processes x 4 threads hammer one fleet budget in a real Redis: the cap holds exactly."""

from __future__ import annotations

import multiprocessing

import pytest

from otel_budget import RedisLedger

from .redis_server import RedisServer
from .workers import CALL_USD, hammer

PROCESSES, THREADS, CALLS = 8, 4, 10
CAP_USD = 1.00


def test_eight_processes_never_exceed_the_fleet_cap_and_refuse_exactly_the_rest(
    redis_server: RedisServer, prefix: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    gate, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=hammer, args=(redis_server.url, prefix, "nightly", CAP_USD, THREADS, CALLS, gate, out))
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        gate.set()  # every thread of every process starts hammering at once
        results = [out.get(timeout=90) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    admitted = sum(r["admitted"] for r in results)
    refused = sum(r["refused"] for r in results)
    expected = round(CAP_USD / CALL_USD)  # 100 calls of $0.01 fit in $1.00
    assert admitted == expected
    assert refused == PROCESSES * THREADS * CALLS - expected
    assert sum(r["bad_refusals"] for r in results) == 0
    detail = RedisLedger(redis_server.url, prefix=prefix).detail("nightly")
    assert detail["used"]["usd"] <= CAP_USD + 1e-9
    assert detail["used"]["usd"] == pytest.approx(expected * CALL_USD)
    assert detail["used"]["steps"] == expected
    assert detail["reserved"]["usd"] == 0
