"""A loopback gateway in front of Claude Code's API: no model request leaves without an admission.

Claude Code (the CLI the Claude Agent SDK drives) makes its model calls itself, and its hooks run around
prompts and tools, not before each request. So a budgeted session points the CLI's `ANTHROPIC_BASE_URL` at
`http://127.0.0.1:PORT/{route}`: one server per process (one daemon thread, one event loop) that forwards every
request to the real API. Each `POST /v1/messages` is first handed to the session's route, which admits it (or
answers it with the wrap-up in place of the model) and reads the response's events before passing them on.
This module only carries bytes; what a request means for the budget is the adapter's business.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ...model._text import error_label

log = logging.getLogger(__name__)

_MESSAGES = "/v1/messages"
#: Headers that belong to one hop (or that we set ourselves) and are not passed on.
_HOP = frozenset({
    "host", "connection", "keep-alive", "content-length", "transfer-encoding", "accept-encoding", "te", "trailer",
    "upgrade", "proxy-authorization", "proxy-connection", "content-encoding",
})
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_ids = itertools.count(1)


class Exchange(Protocol):
    """One admitted model request while the gateway carries it."""

    body: bytes
    """What to send upstream (the request, possibly with a lower output limit)."""
    timeout: float | None
    """Seconds the call may take in flight (None: no bound)."""

    def event(self, event: dict[str, Any]) -> None:
        """One streamed event, read before it is passed on."""

    def response(self, body: dict[str, Any]) -> None:
        """A whole JSON response, read before it is passed on."""

    def finish(self) -> None:
        """The response ended (idempotent)."""

    def fail(self, error: BaseException) -> str | None:
        """The call failed; the wrap-up to answer with when the failure stopped the run (else None)."""

    def abandon(self) -> None:
        """The client went away before the response ended."""


class Route(Protocol):
    """A session's side of the gateway."""

    upstream: str
    """The API base URL the CLI would have used."""

    def admit(self, headers: dict[str, str], body: bytes) -> Exchange | str:
        """Admit one model request: its Exchange, or the wrap-up text to answer with instead of sending it."""


class UpstreamError(Exception):
    """The API answered a model request with an error status."""


def refusal(text: str, model: str, stream: bool) -> tuple[str, bytes]:
    """An assistant message holding `text` (ending the turn), as the API would send it: (content type, body)."""
    message: dict[str, Any] = {
        "id": f"msg_otel_budget_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    if not stream:
        whole = {**message, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
        return "application/json", json.dumps(whole).encode()
    events = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 0}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
    return "text/event-stream", body


def _error(status: int, message: str) -> bytes:
    kind = "not_found_error" if status == 404 else "api_error"
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _events(block: bytes) -> dict[str, Any] | None:
    """The JSON `data` of one server-sent event (None when it has none)."""
    lines = [ln[5:].strip() for ln in block.split(b"\n") if ln.startswith(b"data:")]
    if not lines:
        return None
    try:
        data = json.loads(b"\n".join(lines))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Gateway:
    """The process's loopback gateway: routes by the first path segment, forwards to each route's upstream."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self.port = 0

    # --- routes (any thread) -------------------------------------------------------------------------------

    def add(self, key: str, route: Route) -> str:
        """Serve `route` under `key`; returns the base URL to give the CLI."""
        self._ensure_started()
        with self._lock:
            self._routes[key] = route
        return f"http://127.0.0.1:{self.port}/{key}"

    def remove(self, key: str) -> None:
        with self._lock:
            self._routes.pop(key, None)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._loop is not None:
                return
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            failure: list[BaseException] = []

            def serve() -> None:
                asyncio.set_event_loop(loop)
                try:
                    server = loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
                    self.port = server.sockets[0].getsockname()[1]
                except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                    failure.append(exc)
                    ready.set()
                    return
                ready.set()
                loop.run_forever()

            threading.Thread(target=serve, name="otel-budget-claude-gateway", daemon=True).start()
            ready.wait()
            if failure:
                raise failure[0]
            self._loop = loop

    # --- serving (the gateway's loop) ---------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11

        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = await self._next(conn, reader)
                if not isinstance(event, h11.Request):
                    return
                body = bytearray()
                while True:
                    part = await self._next(conn, reader)
                    if isinstance(part, h11.Data):
                        body += part.data
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
                await self._handle(conn, writer, event, bytes(body))
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            return
        except Exception:  # noqa: BLE001 - one broken exchange must not stop the gateway
            log.warning("otel-budget: the Claude Code gateway failed on a request", exc_info=True)
        finally:
            writer.close()

    @staticmethod
    async def _next(conn: Any, reader: asyncio.StreamReader) -> Any:
        import h11

        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await reader.read(65536))

    async def _handle(self, conn: Any, writer: asyncio.StreamWriter, request: Any, body: bytes) -> None:
        target = request.target.decode("latin-1")
        key, _, rest = target.lstrip("/").partition("/")
        rest = "/" + rest
        with self._lock:
            route = self._routes.get(key)
        if route is None:
            await self._send(conn, writer, 404, "application/json",
                             _error(404, "otel-budget: this Claude Code session has ended"))
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        method = request.method.decode("latin-1")
        exchange: Exchange | None = None
        if method == "POST" and rest.split("?", 1)[0].rstrip("/") == _MESSAGES:
            try:
                admitted = route.admit(headers, body)
            except Exception:  # noqa: BLE001 - our bug: the request goes through unchanged
                log.warning("otel-budget: could not admit a Claude Code request; sending it unmetered", exc_info=True)
            else:
                if isinstance(admitted, str):
                    await self._refuse(conn, writer, admitted, body)
                    return
                exchange = admitted
                body = admitted.body
        await self._forward(conn, writer, route, method, rest, headers, body, exchange)

    async def _refuse(self, conn: Any, writer: asyncio.StreamWriter, text: str, request_body: bytes) -> None:
        try:
            asked = json.loads(request_body or b"{}")
        except ValueError:
            asked = {}
        asked = asked if isinstance(asked, dict) else {}
        kind, data = refusal(text, str(asked.get("model") or ""), asked.get("stream") is True)
        await self._send(conn, writer, 200, kind, data)

    async def _send(self, conn: Any, writer: asyncio.StreamWriter, status: int, kind: str, data: bytes) -> None:
        import h11

        headers = [("content-type", kind), ("content-length", str(len(data)))]
        if status == 404:  # a session that ended: retrying cannot help
            headers.append(("x-should-retry", "false"))
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
        writer.write(conn.send(h11.Data(data=data)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()

    def _http(self) -> Any:
        if self._client is None:
            try:
                import httpx2 as httpx  # what the SDK's own dependencies (mcp) bring
            except ImportError:  # pragma: no cover
                import httpx  # type: ignore[no-redef]
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=30.0))
        return self._client

    async def _forward(self, conn: Any, writer: asyncio.StreamWriter, route: Route, method: str, path: str,
                       headers: dict[str, str], body: bytes, exchange: Exchange | None) -> None:
        import h11

        loop = asyncio.get_running_loop()
        deadline = loop.time() + exchange.timeout if exchange is not None and exchange.timeout else None

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - loop.time())

        client = self._http()
        sent = {k: v for k, v in headers.items() if k not in _HOP}
        sent["accept-encoding"] = "identity"  # the events are read on the way through
        request = client.build_request(method, route.upstream.rstrip("/") + path, headers=sent, content=body)
        try:
            response = await asyncio.wait_for(client.send(request, stream=True), left())
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - the CLI sees a failed request
            text = exchange.fail(exc) if exchange is not None else None
            if text is not None:
                await self._refuse(conn, writer, text, body)
            else:
                await self._send(conn, writer, 502, "application/json",
                                 _error(502, "otel-budget gateway: the API could not be reached "
                                            f"({error_label(exc)})"))
            return
        try:
            out = [(k, v) for k, v in response.headers.items() if k.lower() not in _HOP]
            kind = response.headers.get("content-type", "")
            if exchange is not None and response.status_code >= 400:
                data = await response.aread()
                exchange.fail(UpstreamError(f"HTTP {response.status_code}: {data[:300]!r}"))
                writer.write(conn.send(h11.Response(status_code=response.status_code,
                                                    headers=[*out, ("content-length", str(len(data)))])))
                writer.write(conn.send(h11.Data(data=data)))
            elif exchange is not None and "text/event-stream" not in kind:
                data = await response.aread()
                try:
                    parsed = json.loads(data)
                    if isinstance(parsed, dict):
                        exchange.response(parsed)
                except ValueError:
                    pass
                exchange.finish()
                writer.write(conn.send(h11.Response(status_code=response.status_code,
                                                    headers=[*out, ("content-length", str(len(data)))])))
                writer.write(conn.send(h11.Data(data=data)))
            else:
                writer.write(conn.send(h11.Response(status_code=response.status_code, headers=out)))
                await self._pass_stream(conn, writer, response.aiter_bytes(), exchange, left)
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            if exchange is not None:
                exchange.abandon()
            raise
        except (Exception, asyncio.TimeoutError) as exc:
            if exchange is not None:
                exchange.fail(exc)
            raise ConnectionError("the response could not be passed on") from exc
        finally:
            await response.aclose()

    async def _pass_stream(self, conn: Any, writer: asyncio.StreamWriter, chunks: AsyncIterator[bytes],
                           exchange: Exchange | None, left: Any) -> None:
        """Pass the stream on event by event, each read by the exchange before the client sees it."""
        import h11

        buffer = b""
        iterator = chunks.__aiter__()
        while True:
            try:
                chunk = await asyncio.wait_for(iterator.__anext__(), left())
            except StopAsyncIteration:
                break
            if exchange is None:
                writer.write(conn.send(h11.Data(data=chunk)))
                await writer.drain()
                continue
            buffer += chunk
            ready = b""
            while (match := _EVENT_END.search(buffer)) is not None:
                block, buffer = buffer[:match.end()], buffer[match.end():]
                data = _events(block)
                if data is not None:
                    exchange.event(data)
                ready += block
            if ready:
                writer.write(conn.send(h11.Data(data=ready)))
                await writer.drain()
        if buffer:
            writer.write(conn.send(h11.Data(data=buffer)))
        if exchange is not None:
            exchange.finish()


_gateway: Gateway | None = None
_gateway_lock = threading.Lock()


def gateway() -> Gateway:
    """The process's gateway (started on first use)."""
    global _gateway
    with _gateway_lock:
        if _gateway is None:
            _gateway = Gateway()
        return _gateway


__all__ = ["Exchange", "Gateway", "Route", "UpstreamError", "gateway", "refusal"]
