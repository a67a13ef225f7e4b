"""ScriptedLLM: a loopback HTTP server that answers OpenAI and Anthropic SDK calls from a script."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import anthropic_api, gemini_api, openai_api
from .sse import write_stream
from .turns import RecordedRequest, Turn, make_plan

Responder = Callable[[RecordedRequest], "Turn | None"]

_ROUTES = {
    "/v1/chat/completions": "openai.chat",
    "/chat/completions": "openai.chat",
    "/v1/responses": "openai.responses",
    "/responses": "openai.responses",
    "/v1/messages": "anthropic.messages",
    "/messages": "anthropic.messages",
}
_COUNT_TOKENS = ("/v1/messages/count_tokens", "/messages/count_tokens")


class ScriptedLLM:
    """Scripted OpenAI- and Anthropic-compatible server on loopback; see the package docstring."""

    def __init__(
        self,
        turns: Iterable[Turn] = (),
        default: Turn | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default: Turn | None = default
        """Served when the queue is empty and no responder answers; ``None`` -> HTTP 500."""
        self.responder: Responder | None = None
        """Called with each request; a returned Turn wins over the queue."""
        self.requests: list[RecordedRequest] = []
        """Every request, in arrival order, recorded before any delay."""
        self.reject_stream_options = False
        """``True``: an OpenAI chat request carrying ``stream_options`` is answered HTTP 400 naming that field (as
        some OpenAI-compatible servers do), before any turn is taken; it is still recorded."""
        self._queue: deque[Turn] = deque(turns)
        self._lock = threading.Lock()
        self._ids = 0
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ScriptedLLM:
        """Start serving in a daemon thread (no-op when running)."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.llm = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="ScriptedLLM", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if self._server is None:
            raise RuntimeError("ScriptedLLM is not running: use `with ScriptedLLM() as llm:` or .start()")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for ``OpenAI(base_url=...)``."""
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for ``Anthropic(base_url=...)``."""
        return self.base_url

    # -- script ---------------------------------------------------------------------------------

    def script(self, *turns: Turn) -> ScriptedLLM:
        """Append turns to the FIFO queue."""
        with self._lock:
            self._queue.extend(turns)
        return self

    @property
    def pending(self) -> int:
        """Number of scripted turns not served yet."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Clear the queue, the default turn, the responder and the recorded requests."""
        with self._lock:
            self._queue.clear()
            self.default = None
            self.responder = None
            self.reject_stream_options = False
            self.requests.clear()

    # -- used by the handler --------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_turn(self, request: RecordedRequest) -> Turn | None:
        responder = self.responder
        if responder is not None:
            turn = responder(request)
            if turn is not None:
                return turn
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids


def _usage_as_scripted(payload: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """The response body, without its usage when the turn says so."""
    if not turn.report_usage:
        payload.pop("usage", None)
        payload.pop("usageMetadata", None)
    return payload


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the default backlog (5) resets connections when dozens of threads call at once
    llm: ScriptedLLM

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def server_bind(self) -> None:
        # Skip HTTPServer.server_bind: its getfqdn() can do a slow DNS lookup.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that drop their connection; report anything else."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def track(self, sock: socket.socket, alive: bool) -> None:
        with self._open_lock:
            (self._open.add if alive else self._open.discard)(sock)

    def close_connections(self) -> None:
        with self._open_lock:
            socks = list(self._open)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm and the client's
        # delayed ACK add about 40 ms to every response on loopback.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Stay quiet."""

    def do_GET(self) -> None:  # noqa: N802
        self._read_body()
        self._send_json(404, openai_api.error_body(404, f"ScriptedLLM: no route for GET {self.path}"))

    def do_POST(self) -> None:  # noqa: N802
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        api = _ROUTES.get(path) or gemini_api.route(path)
        if path in _COUNT_TOKENS:
            self._send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        if api is None:
            self._send_json(404, openai_api.error_body(404, f"ScriptedLLM: no route for POST {self.path}"))
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as err:
            self._send_error(api, 400, f"ScriptedLLM: invalid JSON body: {err}")
            return
        llm = self.server.llm
        request = RecordedRequest(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            api=api,
        )
        llm._record(request)
        if llm.reject_stream_options and api == "openai.chat" and "stream_options" in body:
            self._send_json(400, openai_api.unknown_parameter("stream_options"), retry=False)
            return
        try:
            turn = llm._next_turn(request)
        except Exception as err:  # a user's responder failed: say so in the response
            self._send_error(api, 500, f"ScriptedLLM: responder raised {err!r}", retry=False)
            return
        if turn is None:
            self._send_error(
                api,
                500,
                "ScriptedLLM: no scripted turn left; add turns with .script(...) or set .default",
                retry=False,
            )
            return
        if turn.delay > 0:
            time.sleep(turn.delay)
        if turn.status != 200:
            self._send_error(api, turn.status, turn.error_message, retry_after=turn.retry_after)
            return
        self._answer(api, body, len(raw), turn)

    def _answer(self, api: str, body: dict[str, Any], raw_len: int, turn: Turn) -> None:
        llm = self.server.llm
        if api == gemini_api.API:
            plan = gemini_api.plan_for(turn, self.path, body, raw_len, llm._next_id)
            rid = f"gen-{llm._next_id()}"
            if gemini_api.model_and_stream(self.path)[1]:
                write_stream(self, gemini_api.stream(plan, rid, turn), turn)
            else:
                self._send_json(200, _usage_as_scripted(gemini_api.response(plan, rid), turn))
            return
        plan = make_plan(turn, api, body, raw_len, llm._next_id)
        stream = bool(body.get("stream"))
        n = llm._next_id()
        if api == "openai.chat":
            rid = f"chatcmpl-{n}"
            if stream:
                write_stream(self, openai_api.chat_stream(plan, rid, turn, body), turn)
            else:
                self._send_json(200, _usage_as_scripted(openai_api.chat_completion(plan, rid), turn))
        elif api == "openai.responses":
            rid = f"resp_{n}"
            if stream:
                write_stream(self, openai_api.responses_stream(plan, rid, turn, body, llm._next_id), turn)
            else:
                self._send_json(200, _usage_as_scripted(openai_api.response(plan, rid, body, llm._next_id), turn))
        else:
            mid = f"msg_{n}"
            if stream:
                write_stream(self, anthropic_api.message_stream(plan, mid, turn), turn)
            else:
                self._send_json(200, _usage_as_scripted(anthropic_api.message(plan, mid), turn))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_error(
        self, api: str, status: int, message: str, retry: bool = True, retry_after: float | None = None
    ) -> None:
        module: Any = {"anthropic": anthropic_api, "gemini": gemini_api}.get(api.split(".")[0], openai_api)
        self._send_json(status, module.error_body(status, message), retry=retry, retry_after=retry_after)

    def _send_json(
        self, status: int, payload: dict[str, Any], retry: bool = True, retry_after: float | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("Retry-After", f"{retry_after:g}")
            elif status == 429:
                self.send_header("Retry-After", "0")
            if not retry:
                self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
