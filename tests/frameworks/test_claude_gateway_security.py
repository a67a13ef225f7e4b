"""The Claude Code gateway as an attacker tries it: odd spellings of a path, paths that cost money, requests
without the session's key, large and half-sent requests, many connections and subagent ids, and a gateway left
listening. What reached the server is counted there (ScriptedLLM, or a recorder upstream), never by our counters."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("claude_agent_sdk")

import otel_budget  # noqa: E402
from otel_budget.core import calls  # noqa: E402
from otel_budget.instrumentation.frameworks import _claude_http, _claude_session  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_gateway import gateway  # noqa: E402
from otel_budget.instrumentation.frameworks._claude_session import Session  # noqa: E402
from otel_budget.testing import ScriptedLLM, Turn  # noqa: E402

MODEL = "claude-sonnet-4-5"
KEY = "x-otel-budget-key"
MIB = 1024 * 1024
BODY = json.dumps({"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}).encode()


class Recorder:
    """An upstream that records every request that reached it (method and path) and answers `{}`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                recorder.seen.append((self.command, self.path))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = do_DELETE = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    upstream = Recorder()
    yield upstream
    upstream.close()


@contextlib.contextmanager
def serving(run: Any, upstream: str) -> Iterator[tuple[Session, str]]:
    """A session of `run` served by the gateway: (session, the base URL the CLI would get)."""
    session = Session(run.node, MODEL, upstream)
    base = gateway().add(session.id, session)
    try:
        yield session, base
    finally:
        session.close()


def key_of(session: Session) -> str:
    return str(getattr(session, "secret", "no-secret-before-the-fix"))


def raw(base: str, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None,
        timeout: float = 20.0) -> tuple[int, bytes]:
    """Send one request byte for byte (no client normalizes its target): (status, body); status 0 when the
    connection was closed without an answer."""
    port = urlsplit(base).port
    head = [f"{method} {target} HTTP/1.1", "host: 127.0.0.1", "connection: close", f"content-length: {len(body)}",
            "content-type: application/json", "x-api-key: test", "anthropic-version: 2023-06-01"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        data = b""
        with contextlib.suppress(ConnectionError):
            while chunk := sock.recv(65536):
                data += chunk
    if not data:
        return 0, b""
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def route_of(base: str) -> str:
    return urlsplit(base).path.strip("/")


# --- 3. unmetered requests ----------------------------------------------------------------------------------


def test_every_spelling_of_the_messages_path_is_admitted(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("spellings", budget=otel_budget.Budget(max_steps=50)) as run, \
            serving(run, scripted_llm.base_url) as (session, base):
        r = route_of(base)
        targets = [f"/{r}/v1/./messages", f"/{r}/v1/x/../messages", f"/{r}/v1/messages#frag", f"/{r}/v1/%6Dessages",
                   f"/{r}//v1//messages/", f"/{r}/v1/messages?beta=true", f"/./{r}/v1/messages",
                   f"/{r}/v1%2Fmessages", f"/x/../{r}/v1/messages"]
        answers = [raw(base, "POST", target, BODY, {KEY: key_of(session)}) for target in targets]
    assert [status for status, _ in answers] == [200] * len(targets)
    outcome = run.outcome
    assert outcome is not None
    # Every request that reached the API was admitted and metered: nothing went through unmetered.
    assert len(scripted_llm.requests) == outcome.usage.model_calls == len(targets)
    assert {r.path for r in scripted_llm.requests} <= {"/v1/messages", "/v1/messages?beta=true"}


def test_paths_that_are_not_served_are_refused_before_they_reach_the_api(recorder: Recorder, otel: Any) -> None:
    with otel_budget.run("paths") as run, serving(run, recorder.url) as (session, base):
        r, key = route_of(base), {KEY: key_of(session)}
        refused = [raw(base, "POST", f"/{r}{path}", BODY, key)[0] for path in (
            "/v1/complete", "/v1/messages/batches", "/v1/messages/batches?beta=true", "/v1/files", "/v2/messages",
            "/v1/messages/../complete", "/v1/%252e%252e/complete", "/../v1/messages")]
        wrong_method = raw(base, "GET", f"/{r}/v1/messages", b"", key)[0]
        free = [raw(base, "GET", f"/{r}{path}", b"", key)[0] for path in ("/v1/models", "/v1/models/claude-x")]
    assert refused == [404] * 8 and wrong_method == 404
    assert free == [200, 200]
    assert recorder.seen == [("GET", "/v1/models"), ("GET", "/v1/models/claude-x")]  # nothing else reached it
    assert run.outcome is not None and run.outcome.usage.model_calls == 0


def test_a_failing_admission_sends_nothing_and_stops_the_run_with_error(
    scripted_llm: ScriptedLLM, otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the ledger")

    monkeypatch.setattr(calls, "begin", broken)
    with otel_budget.run("broken") as run, serving(run, scripted_llm.base_url) as (session, base):
        status, body = raw(base, "POST", f"/{route_of(base)}/v1/messages", BODY, {KEY: key_of(session)})
    assert scripted_llm.requests == []  # the brake failed closed
    assert status == 200 and "RuntimeError" in json.loads(body)["content"][0]["text"]
    outcome = run.outcome
    assert outcome is not None and outcome.stop_reason == "error"
    assert "RuntimeError" in outcome.detail and "a bug in the ledger" not in outcome.detail


# --- 5. the session's key --------------------------------------------------------------------------------------


def test_requests_without_the_sessions_key_are_refused_and_use_up_nothing(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("keyed", budget=otel_budget.Budget(max_steps=3)) as run, \
            serving(run, scripted_llm.base_url) as (session, base):
        target = f"/{route_of(base)}/v1/messages"
        bogus = [raw(base, "POST", target, BODY, headers)[0]
                 for headers in ({}, {KEY: "guess"}, {KEY: ""}, {KEY.upper(): "guess"})]
        good = [raw(base, "POST", target, BODY, {KEY: key_of(session)})[0] for _ in range(3)]
        client = httpx.post(base + "/v1/messages", content=BODY, headers={KEY: key_of(session)})
    assert bogus == [401] * 4
    assert good == [200] * 3 and client.json()["content"][0]["text"].startswith("Stopped at a limit: max_steps")
    assert len(scripted_llm.requests) == 3  # the bogus requests used up nothing
    assert all(KEY not in r.headers for r in scripted_llm.requests)  # the key is not passed on
    outcome = run.outcome
    assert outcome is not None and outcome.usage.model_calls == 3 and outcome.stop_reason == "steps"


# --- 4. denial of service without the secret ----------------------------------------------------------------


def _flood(base: str, target: str, headers: dict[str, str], size: int) -> bytes:
    """Announce and send `size` bytes of body in 1 MiB writes, as long as the gateway takes them; its answer."""
    port = urlsplit(base).port
    head = [f"POST {target} HTTP/1.1", "host: 127.0.0.1", f"content-length: {size}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    chunk = b"x" * MIB
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        with contextlib.suppress(ConnectionError):
            sock.sendall("\r\n".join(head).encode() + b"\r\n\r\n")
            for _ in range(size // MIB):
                sock.sendall(chunk)
        with contextlib.suppress(ConnectionError):
            while part := sock.recv(65536):
                answer += part
    return answer


def test_a_large_body_is_never_read_for_an_unknown_route_a_missing_key_or_beyond_the_limit(
    scripted_llm: ScriptedLLM, otel: Any
) -> None:
    with otel_budget.run("flood") as run, serving(run, scripted_llm.base_url) as (session, base):
        r = route_of(base)
        cases = [("/no-such-route/v1/messages", {}), (f"/{r}/v1/messages", {}),
                 (f"/{r}/v1/messages", {KEY: key_of(session)})]
        answers = []
        tracemalloc.start()
        try:
            for target, headers in cases:
                answers.append(_flood(base, target, headers, 48 * MIB))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 8 * MIB, f"the gateway grew by {peak / MIB:.0f} MiB"
    statuses = [int(a.split(b" ", 2)[1]) if a else 0 for a in answers]
    assert statuses == [404, 401, 413]
    assert scripted_llm.requests == []


def test_a_half_sent_or_idle_connection_is_closed_after_the_timeout(
    scripted_llm: ScriptedLLM, otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_claude_http, "REQUEST_TIMEOUT", 0.5)
    monkeypatch.setattr(_claude_http, "IDLE_TIMEOUT", 0.5)
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("slow") as run, serving(run, scripted_llm.base_url) as (session, base):
        port = urlsplit(base).port
        head = f"POST /{route_of(base)}/v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n{KEY}: {key_of(session)}\r\n"
        closed = []
        for sent in (b"", head.encode(), f"{head}content-length: 1000\r\n\r\n{{".encode()):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(sent)
                try:
                    closed.append(sock.recv(65536))  # b"": closed by the gateway
                except TimeoutError:
                    closed.append(b"still open after 30 s")
        healthy = raw(base, "POST", f"/{route_of(base)}/v1/messages", BODY, {KEY: key_of(session)})[0]
    assert closed == [b"", b"", b""]
    assert healthy == 200 and len(scripted_llm.requests) == 1


def test_connections_beyond_the_cap_are_closed_and_one_is_served_again_when_another_ends(
    scripted_llm: ScriptedLLM, otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_claude_http, "MAX_CONNECTIONS", 3)
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("many") as run, serving(run, scripted_llm.base_url) as (session, base):
        port = urlsplit(base).port
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as extra:
                try:
                    refused = extra.recv(65536)
                except TimeoutError:
                    refused = b"still open after 30 s"
        finally:
            for sock in held:
                sock.close()
        status = 0
        for _ in range(200):  # the gateway sees the held ones close on its own loop
            status = raw(base, "POST", f"/{route_of(base)}/v1/messages", BODY, {KEY: key_of(session)})[0]
            if status:
                break
            time.sleep(0.05)
    assert refused == b""
    assert status == 200 and len(scripted_llm.requests) == 1


def test_a_session_opens_a_bounded_number_of_subagent_runs(
    scripted_llm: ScriptedLLM, otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_claude_session, "MAX_SUBAGENTS", 3)
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("children", budget=otel_budget.Budget(max_steps=100)) as run, \
            serving(run, scripted_llm.base_url) as (session, base):
        target, key = f"/{route_of(base)}/v1/messages", key_of(session)
        texts = []
        for agent in ("a1", "a2", "a3", "a4", "a5", "a1"):
            status, body = raw(base, "POST", target, BODY, {KEY: key, "x-claude-code-agent-id": agent})
            assert status == 200
            texts.append(json.loads(body)["content"][0]["text"])
        session._close("a2")  # a subagent that ended (SubagentStop) makes room for another
        after = raw(base, "POST", target, BODY, {KEY: key, "x-claude-code-agent-id": "a6"})
    assert texts[:3] == ["ok"] * 3 and texts[5] == "ok"
    assert all("subagent" in text and "3" in text for text in texts[3:5])
    assert json.loads(after[1])["content"][0]["text"] == "ok"
    assert len(scripted_llm.requests) == 5  # a4 and a5 were not sent
    children = [s for s in otel.get_finished_spans() if s.name == "invoke_agent subagent"]
    assert len(children) == 4  # a1, a2, a3, a6: no run for the refused ids
    assert run.outcome is not None and run.outcome.usage.model_calls == 5


def test_thousands_of_connections_and_subagents_leave_the_caps_as_they_found_them(
    scripted_llm: ScriptedLLM, otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's connection count and a session's open subagents are state: after thousands of connections
    (served, refused, cut off) and subagents (started and stopped by the CLI's hooks), the caps still admit."""
    monkeypatch.setattr(_claude_http, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(_claude_session, "MAX_SUBAGENTS", 3)
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("churn", budget=otel_budget.Budget(max_steps=10)) as run, \
            serving(run, scripted_llm.base_url) as (session, base):
        r, key = route_of(base), key_of(session)
        statuses = []
        for n in range(2000):
            target, headers = [(f"/{r}/v1/messages/count_tokens", {KEY: key}), (f"/{r}/v1/messages", {KEY: "x"}),
                               (f"/{r}/v1/complete", {KEY: key}), ("/gone/v1/messages", {})][n % 4]
            statuses.append(raw(base, "POST", target, BODY, headers)[0])

        async def churn() -> None:
            for n in range(2000):
                await session.on_subagent_start({"agent_id": f"sub{n}", "agent_type": "writer"}, None, None)
                await session.on_subagent_stop({"agent_id": f"sub{n}"}, None, None)

        asyncio.run(churn())
        last = raw(base, "POST", f"/{r}/v1/messages", BODY, {KEY: key, "x-claude-code-agent-id": "new"})
    assert statuses == [200, 401, 404, 404] * 500
    assert last[0] == 200 and json.loads(last[1])["content"][0]["text"] == "ok"
    assert len(scripted_llm.requests) == 1
    writers = [s for s in otel.get_finished_spans() if s.name == "invoke_agent writer"]
    assert len(writers) == 2000


def _gateway_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "otel-budget-claude-gateway" and t.is_alive()]


def test_the_gateway_stops_listening_when_its_last_session_closes(scripted_llm: ScriptedLLM, otel: Any) -> None:
    scripted_llm.default = Turn(text="ok", input_tokens=10, output_tokens=2)
    with otel_budget.run("lifecycle") as run:
        first = Session(run.node, MODEL, scripted_llm.base_url)
        second = Session(run.node, MODEL, scripted_llm.base_url)
        base1, base2 = gateway().add(first.id, first), gateway().add(second.id, second)
        port = urlsplit(base1).port
        first.close()
        ended = raw(base1, "POST", f"/{route_of(base1)}/v1/messages", BODY, {KEY: key_of(first)})
        served = raw(base2, "POST", f"/{route_of(base2)}/v1/messages", BODY, {KEY: key_of(second)})
        second.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert _gateway_threads() == []
        third = Session(run.node, MODEL, scripted_llm.base_url)  # a new session starts a new gateway
        base3 = gateway().add(third.id, third)
        try:
            again = raw(base3, "POST", f"/{route_of(base3)}/v1/messages", BODY, {KEY: key_of(third)})
        finally:
            third.close()
    assert ended[0] == 404 and served[0] == 200 and again[0] == 200
    assert len(scripted_llm.requests) == 2
    assert _gateway_threads() == []
