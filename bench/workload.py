"""The workload every overhead benchmark times: the openai SDK against canned answers from an in-process
transport (`httpx2.MockTransport`, since the openai 3.x SDK sends through the httpx2 fork; no sockets), and
the CPU clock that times it."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
from openai import OpenAI

MODEL = "gpt-4o"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarize the quarterly invoice totals for Acme Industrial Supplies."},
]
STREAM_CHUNKS = 20

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
    content = request.content.replace(b" ", b"")
    if b'"stream":true' not in content:
        return httpx2.Response(200, headers=_JSON_HEADERS, content=_COMPLETION)
    usage = b'"include_usage":true' in content
    return httpx2.Response(200, headers=_SSE_HEADERS, content=_STREAM + (_USAGE_CHUNK if usage else b"") + _DONE)


def make_client() -> OpenAI:
    return OpenAI(api_key="bench", base_url="http://bench.invalid/v1", max_retries=0,
                  http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


def call_plain(client: OpenAI) -> None:
    client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]


def call_stream(client: OpenAI) -> None:
    for _ in client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):  # type: ignore[arg-type]
        pass


def call_stream_usage(client: OpenAI) -> None:
    """A stream whose caller asks for its usage itself: every configuration then gets the usage chunk, the peers
    record its tokens, and otel-budget adds nothing to the request and hides nothing from the caller."""
    for _ in client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True,  # type: ignore[arg-type]
                                            stream_options={"include_usage": True}):
        pass


CALLS: dict[str, Callable[[OpenAI], None]] = {"plain": call_plain, "stream": call_stream, "usage": call_stream_usage}


def timed(fn: Callable[[OpenAI], None], client: OpenAI, n: int) -> float:
    """Mean microseconds of process CPU time (`time.process_time_ns`) per call over n calls.

    The transport is in-process and spans are exported synchronously, so all of a call's work is this
    process's; unlike wall time, CPU time does not count the time other processes hold a busy machine's CPU.
    """
    gc.collect()
    start = time.process_time_ns()
    for _ in range(n):
        fn(client)
    return (time.process_time_ns() - start) / n / 1000
