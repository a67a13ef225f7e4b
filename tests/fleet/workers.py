"""Code run in child processes (multiprocessing, spawn) by the fleet tests and bench/fleet.py."""

from __future__ import annotations

import threading
import time
from typing import Any

CALL_USD = 0.01


def hammer(url: str, prefix: str, scope: str, cap_usd: float, threads: int, calls: int, gate: Any, out: Any) -> None:
    """`threads` threads, each making `calls` calls: reserve $0.01 worst case, settle $0.01 actual."""
    from otel_budget import RedisLedger
    from otel_budget.core.ledger import Refusal

    store = RedisLedger(url, prefix=prefix, socket_timeout=2.0)
    counts = {"admitted": 0, "refused": 0, "bad_refusals": 0}
    lock = threading.Lock()

    def loop() -> None:
        gate.wait()
        for _ in range(calls):
            result = store.reserve(scope, {"usd": CALL_USD, "steps": 1.0}, {"usd": cap_usd})
            if isinstance(result, Refusal):
                # a refusal must be a money refusal that really would not have fit
                ok = result.dim == "usd" and result.used + result.requested > cap_usd
                with lock:
                    counts["refused"] += 1
                    counts["bad_refusals"] += not ok
                continue
            store.settle(result, {"usd": CALL_USD, "steps": 1.0})
            with lock:
                counts["admitted"] += 1

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    store.close()
    out.put(counts)


def hold_reservations(url: str, prefix: str, scope: str, n: int, usd: float, cap: float, ttl: float, out: Any) -> None:
    """Reserve `n` times and never settle: the process is then killed while holding them."""
    from otel_budget import RedisLedger
    from otel_budget.core.ledger import Reservation

    store = RedisLedger(url, prefix=prefix, reservation_ttl=ttl)
    held = [store.reserve(scope, {"usd": usd}, {"usd": cap}) for _ in range(n)]
    out.put(sum(isinstance(r, Reservation) for r in held))
    time.sleep(600)


def attached_worker(url: str, prefix: str, base_url: str, token: str, calls: int, out: Any) -> None:
    """A worker process: attach to the coordinator's tree with the token and make `calls` model calls."""
    import openai
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_budget
    from otel_budget.fleet import propagation

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_budget.instrument(tracer_provider=provider, ledger=otel_budget.RedisLedger(url, prefix=prefix))
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    sent = 0
    with propagation.attach_run(token, name="worker") as run:
        for _ in range(calls):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "work"}])
            sent += 1
    spans = [
        {
            "name": s.name,
            "trace_id": format(s.context.trace_id, "032x"),
            "span_id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]
    outcome = run.outcome
    out.put({"sent": sent, "spans": spans, "stop": outcome.stop_reason.value if outcome else None,
             "steps": outcome.usage.model_calls if outcome else None})
    otel_budget.uninstrument()
