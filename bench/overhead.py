"""Per-call overhead of otel-budget against the bare openai SDK and OpenInference's OpenAI instrumentor.

One process, configurations alternated in rounds, an in-process transport (`httpx2.MockTransport`, since the
openai 3.x SDK sends through the httpx2 fork) answering with canned chat JSON or a 20-chunk SSE stream, and
every span going to an in-memory exporter through a SimpleSpanProcessor. Prints a table (microseconds per
call, median of the rounds) and writes it to bench/results.md. Run: `make bench` or
`.venv/bin/python bench/overhead.py [--rounds N] [--calls N] [--run-length N]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI, OpenAI
from openai._base_client import AsyncAPIClient, SyncAPIClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget

MODEL = "gpt-4o"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarize the quarterly invoice totals for Acme Industrial Supplies."},
]
STREAM_CHUNKS = 20
BUDGET = otel_budget.Budget(max_steps=10**7, max_usd=10**6, max_total_tokens=10**12)

# --- the canned server ----------------------------------------------------------------------------------

_COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1767225600, "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None, "message": {
        "role": "assistant", "refusal": None,
        "content": "Acme's invoices this quarter total USD 45,066.78 over 18 invoices; none is overdue."}}],
    "usage": {"prompt_tokens": 41, "completion_tokens": 24, "total_tokens": 65,
              "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
    "system_fingerprint": "fp_bench",
}).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1767225600,
                            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_bench",
                            "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_TEXT = ("Acme's invoices this quarter total USD 45,066.78 over 18 invoices and none of them is overdue so "
         "the payment run can go ahead as planned.")
_WORDS = _TEXT.split(" ")
_STREAM = b"".join(
    [_chunk({"role": "assistant", "content": ""})]
    + [_chunk({"content": " " + w}) for w in _WORDS[: STREAM_CHUNKS - 2]]
    + [_chunk({}, finish="stop")]
)
_USAGE_CHUNK = _chunk({}, usage={"prompt_tokens": 41, "completion_tokens": 24, "total_tokens": 65})
_DONE = b"data: [DONE]\n\n"
_JSON_HEADERS = {"content-type": "application/json"}
_SSE_HEADERS = {"content-type": "text/event-stream"}


def handler(request: httpx2.Request) -> httpx2.Response:
    """Canned answers: a chat completion, or a 20-chunk stream (plus the usage chunk when asked for)."""
    content = request.content
    if b'"stream":true' not in content.replace(b" ", b""):
        return httpx2.Response(200, headers=_JSON_HEADERS, content=_COMPLETION)
    usage = b'"include_usage":true' in content.replace(b" ", b"")
    return httpx2.Response(200, headers=_SSE_HEADERS, content=_STREAM + (_USAGE_CHUNK if usage else b"") + _DONE)


def make_client() -> OpenAI:
    return OpenAI(api_key="bench", base_url="http://bench.invalid/v1", max_retries=0,
                  http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


def call_plain(client: OpenAI) -> None:
    client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]


def call_stream(client: OpenAI) -> None:
    for _ in client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):  # type: ignore[arg-type]
        pass


# --- configurations -------------------------------------------------------------------------------------


_ORIGINALS = {SyncAPIClient: SyncAPIClient.__dict__["request"], AsyncAPIClient: AsyncAPIClient.__dict__["request"]}


def pristine() -> bool:
    """True when the openai SDK is exactly as imported: no wrapper and no shadowing attribute anywhere."""
    return (
        all(cls.__dict__["request"] is fn for cls, fn in _ORIGINALS.items())
        and "request" not in OpenAI.__dict__
        and "request" not in AsyncOpenAI.__dict__
    )


@dataclass
class Config:
    name: str
    setup: Callable[[TracerProvider], Callable[[], None]]
    """Instrument; returns the undo function."""
    in_run: bool = False


def _baseline(tp: TracerProvider) -> Callable[[], None]:
    return lambda: None


def _openinference(tp: TracerProvider) -> Callable[[], None]:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp)

    def undo() -> None:
        inst.uninstrument()
        # OpenInference "restores" by assigning the function it read to OpenAI.request / AsyncOpenAI.request,
        # which leaves a class attribute shadowing SyncAPIClient.request. Remove it when it is the original.
        for cls, base in ((OpenAI, SyncAPIClient), (AsyncOpenAI, AsyncAPIClient)):
            if cls.__dict__.get("request") is base.__dict__["request"]:
                delattr(cls, "request")

    return undo


def _otel_budget(tp: TracerProvider) -> Callable[[], None]:
    otel_budget.instrument(tracer_provider=tp)
    return otel_budget.uninstrument


CONFIGS = [
    Config("baseline (no instrumentation)", _baseline),
    Config("OpenInference", _openinference),
    Config("otel-budget, tracing only", _otel_budget),
    Config("otel-budget, budgeted run", _otel_budget, in_run=True),
]


@contextmanager
def configured(config: Config, tp: TracerProvider) -> Iterator[None]:
    assert pristine(), "the openai SDK was left patched by the previous configuration"
    undo = config.setup(tp)
    try:
        with ExitStack() as stack:
            if config.in_run:
                stack.enter_context(otel_budget.run("bench", budget=BUDGET))
            yield
    finally:
        undo()
    if not pristine():
        raise SystemExit(f"{config.name}: uninstrument did not restore the original openai methods")


# --- measurement ----------------------------------------------------------------------------------------


def timed(fn: Callable[[OpenAI], None], client: OpenAI, n: int) -> float:
    """Mean microseconds of this thread's CPU time per call over n calls.

    Everything a call does happens on this thread (the transport is in-process), so its CPU time is its cost;
    unlike wall time it does not count the time other processes of a busy machine hold the CPU.
    """
    gc.collect()
    start = time.thread_time_ns()
    for _ in range(n):
        fn(client)
    return (time.thread_time_ns() - start) / n / 1000


def rounds(n_rounds: int, calls: int) -> dict[tuple[str, str], list[float]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    client = make_client()
    samples: dict[tuple[str, str], list[float]] = {}
    for r in range(n_rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[: r % len(CONFIGS)]  # rotate who goes first
        for config in order:
            with configured(config, tp):
                for kind, fn, n in (("plain", call_plain, calls), ("stream", call_stream, max(1, calls // 2))):
                    timed(fn, client, 5)  # warm up
                    exporter.clear()
                    samples.setdefault((config.name, kind), []).append(timed(fn, client, n))
                    if config.name != CONFIGS[0].name and not exporter.get_finished_spans():
                        raise SystemExit(f"{config.name}: no spans were recorded")
                    exporter.clear()
        if (r + 1) % 10 == 0:
            print(f"  round {r + 1}/{n_rounds} done", file=sys.stderr)
    return samples


def run_length(length: int, window: int, reps: int = 9) -> list[tuple[int, float, float]]:
    """Per-call time from turn 1, 100 and `length` of one budgeted run, against the bare call at the same point.

    At each mark, windows of metered calls alternate with windows of bare calls (sent as "nested" calls, which
    the wrapper passes straight through: the bare SDK plus one context-variable read); medians of `reps`.
    The first metered window starts at the mark's turn.
    """
    from otel_budget.core.calls import in_call

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    client = make_client()
    flag = in_call()

    def bare(c: OpenAI) -> None:
        token = flag.set(True)
        try:
            call_plain(c)
        finally:
            flag.reset(token)

    out = []
    undo = _otel_budget(tp)
    try:
        with otel_budget.run("bench-length", budget=BUDGET) as run:
            for mark in (m for m in (1, 100, length) if m <= length):
                while run.node.turns < mark - 1:
                    call_plain(client)
                    if run.node.turns % 1000 == 0:
                        exporter.clear()
                metered, plain = [], []
                for _ in range(reps):
                    metered.append(timed(call_plain, client, window))
                    plain.append(timed(bare, client, window))
                    exporter.clear()
                out.append((mark, statistics.median(metered), statistics.median(plain)))
    finally:
        undo()
    return out


def wrapper_length(marks: tuple[int, ...] = (1, 100, 10_000, 100_000), window: int = 200, reps: int = 15
                   ) -> list[tuple[int, float]]:
    """The wrapper alone (the SDK's `request` replaced by a function returning a parsed completion), at turns
    1, 100, 10,000 and 100,000 of one budgeted run: a precise check that nothing grows with the run."""
    from openai._models import FinalRequestOptions
    from openai.types.chat import ChatCompletion

    from otel_budget.instrumentation.providers._request import sync_wrapper
    from otel_budget.instrumentation.providers.openai import OpenAIAdapter

    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    result = ChatCompletion.model_validate_json(_COMPLETION)
    options = FinalRequestOptions.construct(  # type: ignore[attr-defined]
        method="post", url="/chat/completions", json_data={"model": MODEL, "messages": MESSAGES}
    )
    wrapper = sync_wrapper(OpenAIAdapter())

    def send(*args: Any, **kwargs: Any) -> Any:
        return result

    def one(_: Any = None) -> None:
        wrapper(send, None, (ChatCompletion, options), {})

    out = []
    undo = _otel_budget(tp)
    try:
        with otel_budget.run("bench-wrapper", budget=BUDGET) as run:
            for mark in marks:
                while run.node.turns < mark - 1:
                    one()
                    if run.node.turns % 1000 == 0:
                        exporter.clear()
                samples = []
                for _ in range(reps):
                    samples.append(timed(one, None, window))  # type: ignore[arg-type]
                    exporter.clear()
                out.append((mark, statistics.median(samples)))
    finally:
        undo()
    return out


# --- report ---------------------------------------------------------------------------------------------


def report(samples: dict[tuple[str, str], list[float]], lengths: list[tuple[int, float, float]],
           wrapper: list[tuple[int, float]], n_rounds: int, calls: int) -> str:
    med = {key: statistics.median(v) for key, v in samples.items()}
    base_name, oi_name = CONFIGS[0].name, CONFIGS[1].name
    lines = [
        "# otel-budget overhead per call",
        "",
        f"openai {openai.__version__}, Python {platform.python_version()}, {platform.machine()}; "
        f"{n_rounds} rounds, configurations alternated; {calls} non-streamed and {max(1, calls // 2)} streamed "
        f"({STREAM_CHUNKS} chunks) calls per configuration and round; in-process httpx2.MockTransport; spans to "
        "an in-memory exporter (SimpleSpanProcessor); no MeterProvider (metrics API no-op). "
        "Microseconds of thread CPU time per call (time.thread_time_ns), median of the rounds.",
        "",
        "| configuration | call | us/call | overhead vs baseline | overhead / OpenInference's |",
        "|---|---|---:|---:|---:|",
    ]
    for kind in ("plain", "stream"):
        base = med[(base_name, kind)]
        oi = med[(oi_name, kind)] - base
        label = "non-streamed" if kind == "plain" else f"streamed ({STREAM_CHUNKS} chunks)"
        for config in CONFIGS:
            value = med[(config.name, kind)]
            over = value - base
            ratio = "" if config.name == base_name else f"{over / oi:.2f}" if oi > 0 else "n/a"
            over_text = "" if config.name == base_name else f"{over:+.0f}"
            lines.append(f"| {config.name} | {label} | {value:.0f} | {over_text} | {ratio} |")
    lines += [
        "",
        "Run length: one budgeted run of non-streamed calls; from each turn on, windows of metered calls "
        "alternate with bare calls (median of 9 windows of 20).",
        "",
        "| turn | otel-budget us/call | bare call us/call | overhead |",
        "|---:|---:|---:|---:|",
    ]
    for mark, t, b in lengths:
        lines.append(f"| {mark:,} | {t:.0f} | {b:.0f} | {t - b:+.0f} |")
    lines += [
        "",
        "The wrapper alone in one budgeted run (the SDK's request replaced by a function returning a parsed "
        "completion; span, admission, pricing, settlement all included):",
        "",
        "| turn | us/call |",
        "|---:|---:|",
    ]
    for mark, t in wrapper:
        lines.append(f"| {mark:,} | {t:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=60, help="non-streamed calls per configuration and round")
    parser.add_argument("--run-length", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results.md"))
    args = parser.parse_args(argv)
    assert pristine()
    samples = rounds(args.rounds, args.calls)
    lengths = run_length(args.run_length, args.window)
    wrapper = wrapper_length()
    text = report(samples, lengths, wrapper, args.rounds, args.calls)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
