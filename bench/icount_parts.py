"""Instructions of the hot path's parts, each alone: where a call's instructions go, part by part.

Each part runs N and 2N times in a fresh process under valgrind's callgrind (one hash seed; after warm-up what
exists is frozen and the collector is off), inside a budgeted run with every limit on (as `overhead.py` runs it)
and a no-op tracer; the difference over N is the part's instructions. No SDK: `hot_path.py --icount` counts
whole calls through the real SDK, this says which part of ours they are made of. An empty part shows the loop's own cost (about 500).

Run: `.venv/bin/python bench/icount_parts.py [--calls 400] [--parts admit_settle,reserve_release,...] [--branches]`
(`--branches`: the mispredicted branches of cachegrind's simulated predictor too; see results.md on why they matter).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
ROOT = Path(__file__).resolve().parent.parent


def parts() -> dict[str, Callable[[], Any]]:
    """The parts, set up in a budgeted run that stays open (each is called N times)."""
    from hot_path import budget
    from openai._models import FinalRequestOptions, construct_type
    from openai._streaming import SSEDecoder
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from opentelemetry.trace import NoOpTracerProvider
    from workload import _COMPLETION, _STREAM, MESSAGES

    import otel_budget
    from otel_budget.core import calls, config
    from otel_budget.core import ledger as lg
    from otel_budget.core.node_state import Admission
    from otel_budget.core.run import current_run
    from otel_budget.instrumentation.providers import _stream, _wire
    from otel_budget.instrumentation.providers import openai as oa
    from otel_budget.instrumentation.providers._on_collect import detach, on_collect
    from otel_budget.instrumentation.providers._request import sync_wrapper
    from otel_budget.model.call import ModelCall, TokenUsage

    otel_budget.instrument(tracer_provider=NoOpTracerProvider())
    otel_budget.run("parts", budget=budget(otel_budget)).__enter__()  # open for the process's life
    node = current_run()
    assert node is not None
    body = {"model": "gpt-4o", "messages": MESSAGES}
    options = type("Options", (), {"json_data": body})()
    amounts = {"steps": 1.0, "input_tokens": 100.0, "output_tokens": 4096.0, "total_tokens": 4196.0, "usd": 0.01}
    actual = {"steps": 1.0, "input_tokens": 41.0, "output_tokens": 24.0, "total_tokens": 65.0, "usd": 0.0003}
    adm = Admission(node, dict(amounts))
    pricing = config.get().prices.lookup("openai", "gpt-4o")
    assert pricing is not None

    def size() -> int:
        return 300

    class Item:
        pass

    class Response:
        def close(self) -> None:
            pass

    class Stream:  # what the proxies need of an SDK stream
        def __init__(self) -> None:
            self.response = Response()
            self._decoder = SSEDecoder()

        def __next__(self) -> Any:
            raise StopIteration

    streamed = ModelCall("openai", "chat", "gpt-4o", None, True)

    def noop(*args: Any) -> None:
        pass

    def begin_finish() -> None:
        call = ModelCall("openai", "chat", "gpt-4o", None, False)
        call.prompt = (body, "messages")
        guard = calls.begin(call, _wire.RequestSize(options))
        assert guard is not None
        call.usage = TokenUsage(41, 24)
        call.finish_reasons.append("stop")
        guard.finish()

    completion = ChatCompletion.model_validate_json(_COMPLETION)
    request = (ChatCompletion, FinalRequestOptions.construct(  # type: ignore[attr-defined]
        method="post", url="/chat/completions", json_data={"model": "gpt-4o", "messages": MESSAGES}))
    wrapper = sync_wrapper(oa.OpenAIAdapter())

    def sdk_request(*args: Any, **kwargs: Any) -> Any:
        return completion

    stream_request = (ChatCompletion, FinalRequestOptions.construct(  # type: ignore[attr-defined]
        method="post", url="/chat/completions", json_data={"model": "gpt-4o", "messages": MESSAGES, "stream": True}))

    def sdk_stream(*args: Any, **kwargs: Any) -> Any:
        return Stream()

    chunks = [construct_type(type_=ChatCompletionChunk, value=json.loads(event[len(b"data: "):]))
              for event in _STREAM.split(b"\n\n") if event]

    def feed_chunks() -> None:
        reader = oa.ChatStream(ModelCall("openai", "chat", "gpt-4o", None, True), True)
        reader.watch(Stream())  # armed at the finish: the stream's decoder then skips the usage-only event
        for chunk in chunks:
            reader.feed(chunk)

    def stream_call() -> None:
        for _ in wrapper(sdk_stream, None, stream_request, {"stream": True}):
            pass

    return {
        "empty": lambda: None,
        "wrapper (a non-streamed call, the SDK's request a stand-in; no span)": lambda: wrapper(sdk_request, None,
                                                                                                request, {}),
        "stream wrapper (a stand-in stream with no event, read to its end; no span)": stream_call,
        "begin_finish (the core of a call; no span)": begin_finish,
        "admit_settle": lambda: node.settle(node.admit("openai", "gpt-4o", None, size, 1, (body, "messages")),
                                            input_tokens=41, output_tokens=24, cost=0.0003, input_chars=300),
        "admit_release": lambda: node.release(node.admit("openai", "gpt-4o", None, size, 1, (body, "messages"))),
        "reserve_release (ledger; 5 dims)": lambda: (lg.reserve_locked(node.accounts, amounts),
                                                     lg.settle_locked(node.accounts, amounts, {})),
        "settle_locked (5 dims used)": lambda: lg.settle_locked(node.accounts, {}, actual),
        "check_near": node._check_near,
        "check_gates": lambda: node._check_gates("the call"),
        "headroom (one dimension)": lambda: lg.headroom(node.accounts, "usd"),
        "reserve_here + done": lambda: (node._reserve_here(adm, True), lg.settle_locked(node.accounts, adm.amounts, {}),
                                        node._done_locked(adm)),
        "pricing.cost": lambda: pricing.cost(100, 0),
        "ModelCall()": lambda: ModelCall("openai", "chat", "gpt-4o", None, False),
        "TokenUsage()": lambda: TokenUsage(41, 24),
        "Guard() outside a run, settled": lambda: calls.Guard(streamed, None, None, None, size)._claim(),
        "body_chars (2 messages)": lambda: _wire.body_chars(options),
        "read_results (stall check)": lambda: node.read_results(body, "messages"),
        "object()": Item,
        "weakref.finalize + detach": lambda: weakref.finalize(Item(), noop).detach(),
        "on_collect + detach": lambda: detach(on_collect(Item(), noop)),
        "SyncStream over a stand-in": lambda: _stream.SyncStream(
            Stream(), calls.Guard(streamed, None, None, None, size), oa.ChatStream(streamed, False)),
        "ChatStream + watch": lambda: oa.ChatStream(streamed, True).watch(Stream()),
        "ChatStream.feed (the bench stream's 20 chunks, as the SDK builds them; watching a stream)": feed_chunks,
    }


def _child(name: str, n: int) -> None:
    part = parts()[name]
    for _ in range(20):
        part()
    gc.collect()
    gc.freeze()
    gc.disable()  # a collection landing in the N count and not the 2N one would move the difference
    for _ in range(n):
        part()


def _count(name: str, n: int, branches: bool = False) -> dict[str, int]:
    from hot_path import valgrind_events

    env = {**os.environ, "PYTHONHASHSEED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return valgrind_events([__file__, "--one", name, str(n)], env, branches=branches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--calls", type=int, default=400, help="N")
    ap.add_argument("--parts", default="", help="comma-separated part names (default: all)")
    ap.add_argument("--branches", action="store_true",
                    help="also the branches cachegrind's simulated predictor misses (conditional + indirect)")
    ap.add_argument("--one", nargs=2, metavar=("PART", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _child(args.one[0], int(args.one[1]))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    known = list(parts())
    # a name given picks the parts whose name starts with it ("reserve_release", "begin_finish")
    names = [k for p in args.parts.split(",") if p for k in known if k.startswith(p)] if args.parts else known
    if not names:
        raise SystemExit(f"no part starts with {args.parts!r}; parts: {', '.join(known)}")
    n = args.calls
    jobs = [(name, calls) for name in names for calls in (n, 2 * n)]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # each job is a process: one per core
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job, branches=args.branches), jobs), strict=True))
    tool = "cachegrind, simulated branch prediction" if args.branches else "callgrind"
    print(f"instructions per part ({tool}, {n} and {2 * n} runs after 20 warm-up runs, every limit on)")
    print("| part | instructions |" + (" mispredicted branches (conditional + indirect) |" if args.branches else ""))
    print("|---|---:|" + ("---:|" if args.branches else ""))
    for name in names:
        per = {k: (counts[(name, 2 * n)][k] - counts[(name, n)][k]) / n for k in counts[(name, n)]}
        more = (f" {per['Bcm'] + per['Bim']:,.0f} ({per['Bcm']:,.0f} + {per['Bim']:,.0f}) |" if args.branches else "")
        print(f"| {name} | {per['Ir']:,.0f} |{more}")


if __name__ == "__main__":
    main()
