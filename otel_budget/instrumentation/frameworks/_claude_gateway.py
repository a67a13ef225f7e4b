"""A loopback gateway in front of Claude Code's API: no model request leaves without an admission.

Claude Code (the CLI the Claude Agent SDK drives) makes its model calls itself, and its hooks run around
prompts and tools, not before each request. So a budgeted session points the CLI's `ANTHROPIC_BASE_URL` at
`http://127.0.0.1:PORT/{route}`: one server per process (one daemon thread, one event loop, while a session is
open) that forwards to the real API what it serves. Every request must carry the session's key header besides its
route; both, and its normalized path, are checked on its head before its body is read (`_claude_http`). Each
`POST /v1/messages` is then handed to the session's route, which admits it (or answers it with the wrap-up in
place of the model) and reads the response's events before passing them on; when admitting fails, the request is
not sent. This module only carries bytes; what a request means for the budget is the adapter's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import json
import logging
import re
import threading
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ...model._text import error_label
from . import _claude_http as http
from ._claude_http import content_length as _content_length
from ._claude_http import error_body as _error
from ._claude_http import refusal
from ._claude_serving import Serving

log = logging.getLogger(__name__)

#: Headers that belong to one hop (or that we set ourselves) and are not passed on.
_HOP = frozenset({
    "host", "connection", "keep-alive", "content-length", "transfer-encoding", "accept-encoding", "te", "trailer",
    "upgrade", "proxy-authorization", "proxy-connection", "content-encoding",
})
_EVENT_END = re.compile(rb"\r?\n\r?\n")
#: A refused request's body up to this size is read away, so its connection can go on; a larger one is not read.
_DRAINED = 64 * 1024
#: Seconds the rest of a refused large request is read and dropped after the answer (so the client reads it).
_LINGER = 5.0
#: Answers that retrying cannot change.
_FINAL = frozenset({400, 401, 404, 413, 500})
_TOO_LARGE = f"otel-budget gateway: the request body is larger than {http.MAX_BODY} bytes"


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
    secret: str
    """The value of the SECRET_HEADER every request of the session carries."""

    def admit(self, headers: dict[str, str], body: bytes) -> Exchange | str:
        """Admit one model request: its Exchange, or the wrap-up text to answer with instead of sending it."""


class UpstreamError(Exception):
    """The API answered a model request with an error status."""


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


class BadRequest(Exception):
    """A request the API would refuse as it is (answered 400, never sent)."""


_SERVING: contextvars.ContextVar[Serving] = contextvars.ContextVar("otel_budget_claude_serving")


class Gateway:
    """The process's loopback gateway: routes by the first path segment, forwards to each route's upstream.

    It listens from its first session's start to its last session's end (then a new session starts it again)."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._serving: Serving | None = None

    @property
    def port(self) -> int:
        """The port it listens on (0 when it is not listening)."""
        serving = self._serving
        return serving.port if serving is not None else 0

    # --- routes (any thread) -------------------------------------------------------------------------------

    def add(self, key: str, route: Route) -> str:
        """Serve `route` under `key`; returns the base URL to give the CLI."""
        with self._lock:
            if self._serving is None:
                self._serving = Serving(self._connection)
            self._routes[key] = route
            port = self._serving.port
        return f"http://127.0.0.1:{port}/{key}"

    def remove(self, key: str) -> None:
        """Stop serving `key`; with it the last, stop listening."""
        with self._lock:
            self._routes.pop(key, None)
            if self._routes or self._serving is None:
                return
            serving, self._serving = self._serving, None
        serving.stop()

    # --- serving (the gateway's loop) ---------------------------------------------------------------------

    async def _connection(self, serving: Serving, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        import h11

        if len(serving.connections) >= http.MAX_CONNECTIONS:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        serving.connections.add(task)
        _SERVING.set(serving)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=http.MAX_HEAD)
        try:
            while True:
                event, deadline = await self._head(conn, reader)
                if not isinstance(event, h11.Request):
                    return
                checked = self._check(event)
                if not isinstance(checked[0], int):
                    route, kind, path = checked
                    body = await self._body(conn, reader, deadline, http.MAX_BODY)
                    if body is None:
                        await self._decline(conn, reader, writer, 413, _TOO_LARGE, None, deadline)
                        return
                    await self._handle(conn, writer, event, route, kind, path, body)
                elif not await self._decline(conn, reader, writer, checked[0], checked[1], event, deadline):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, TimeoutError, h11.ProtocolError, asyncio.IncompleteReadError):
            return
        except Exception:  # noqa: BLE001 - one broken exchange must not stop the gateway
            log.warning("otel-budget: the Claude Code gateway failed on a request", exc_info=True)
        finally:
            serving.connections.discard(task)
            writer.close()

    @staticmethod
    async def _receive(conn: Any, reader: asyncio.StreamReader, deadline: float) -> Any:
        """The next h11 event, reading until `deadline` (TimeoutError beyond it)."""
        import h11

        loop = asyncio.get_running_loop()
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            conn.receive_data(await asyncio.wait_for(reader.read(65536), left))

    async def _head(self, conn: Any, reader: asyncio.StreamReader) -> tuple[Any, float]:
        """The next request's head: its first byte within IDLE_TIMEOUT, the whole request within REQUEST_TIMEOUT of
        it. Returns the event and the deadline its body must arrive by."""
        import h11

        loop = asyncio.get_running_loop()
        if conn.trailing_data[0]:  # the next request's first bytes came with the last one
            deadline = loop.time() + http.REQUEST_TIMEOUT
            return await self._receive(conn, reader, deadline), deadline
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event, loop.time() + http.REQUEST_TIMEOUT
        first = await asyncio.wait_for(reader.read(65536), http.IDLE_TIMEOUT)
        deadline = loop.time() + http.REQUEST_TIMEOUT
        conn.receive_data(first)
        return await self._receive(conn, reader, deadline), deadline

    async def _body(self, conn: Any, reader: asyncio.StreamReader, deadline: float, limit: int) -> bytes | None:
        """The request's body, or None when it is longer than `limit` (what came is not kept)."""
        import h11

        body = bytearray()
        while True:
            part = await self._receive(conn, reader, deadline)
            if isinstance(part, h11.Data):
                if len(body) + len(part.data) > limit:
                    return None
                body += part.data
            elif isinstance(part, h11.EndOfMessage):
                return bytes(body)
            else:
                raise ConnectionError("the request ended before its body")

    def _check(self, request: Any) -> tuple[Route, http.Kind, str] | tuple[int, str]:
        """From the request's head alone: its route, what it is and the path to send, or (status, why not)."""
        method = request.method.decode("latin-1")
        parsed = http.normalize(request.target.decode("latin-1"))
        if parsed is None or not parsed[0]:
            return 404, "otel-budget gateway: not a path this gateway serves"
        segments, query = parsed
        with self._lock:
            route = self._routes.get(segments[0])
        if route is None:
            return 404, "otel-budget: this Claude Code session has ended"
        given = [v for k, v in request.headers if k == http.SECRET_HEADER.encode()]
        if len(given) != 1 or not hmac.compare_digest(given[0], route.secret.encode()):
            return 401, f"otel-budget gateway: this session's requests carry its {http.SECRET_HEADER} header"
        found = http.endpoint(method, segments[1:])
        if found is None:
            return 404, (f"otel-budget gateway: {method} /{'/'.join(segments[1:])} is not served "
                         f"(only {http.served()})")
        kind, path = found
        length = _content_length(request)
        if length is not None and length > http.MAX_BODY:
            return 413, _TOO_LARGE
        return route, kind, path + (f"?{query}" if query else "")

    async def _decline(self, conn: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                       message: str, request: Any, deadline: float) -> bool:
        """Answer `status` without reading the body into memory; True when the connection can go on."""
        length = _content_length(request) if request is not None else None
        if length is not None and length <= _DRAINED:  # read a small body away: the connection goes on
            await self._body(conn, reader, deadline, _DRAINED)
            await self._send(conn, writer, status, "application/json", _error(status, message))
            return True
        await self._send(conn, writer, status, "application/json", _error(status, message), close=True)
        # Read what is still coming and drop it, so the client reads the answer instead of a reset.
        loop = asyncio.get_running_loop()
        end = min(deadline, loop.time() + _LINGER)
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            while (left := end - loop.time()) > 0:
                dropped: bytes = await asyncio.wait_for(reader.read(65536), left)
                if not dropped:
                    break
        return False

    async def _handle(self, conn: Any, writer: asyncio.StreamWriter, request: Any, route: Route, kind: http.Kind,
                      path: str, body: bytes) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers
                   if k != http.SECRET_HEADER.encode()}  # the session's key is not passed on
        method = request.method.decode("latin-1")
        exchange: Exchange | None = None
        if kind == "admit":
            try:
                admitted = route.admit(headers, body)
            except BadRequest as exc:
                await self._send(conn, writer, 400, "application/json", _error(400, f"otel-budget gateway: {exc}"))
                return
            except Exception as exc:  # noqa: BLE001 - our bug: the request is not sent (the brake fails closed)
                log.warning("otel-budget: could not admit a Claude Code request; it was not sent", exc_info=True)
                await self._send(conn, writer, 500, "application/json", _error(
                    500, f"otel-budget gateway: the request was not sent: admitting it failed ({type(exc).__name__})"))
                return
            if isinstance(admitted, str):
                await self._refuse(conn, writer, admitted, body)
                return
            exchange = admitted
            body = admitted.body
        await self._forward(conn, writer, route, method, path, headers, body, exchange)

    async def _refuse(self, conn: Any, writer: asyncio.StreamWriter, text: str, request_body: bytes) -> None:
        try:
            asked = json.loads(request_body or b"{}")
        except ValueError:
            asked = {}
        asked = asked if isinstance(asked, dict) else {}
        kind, data = refusal(text, str(asked.get("model") or ""), asked.get("stream") is True)
        await self._send(conn, writer, 200, kind, data)

    async def _send(self, conn: Any, writer: asyncio.StreamWriter, status: int, kind: str, data: bytes,
                    close: bool = False) -> None:
        import h11

        headers = [("content-type", kind), ("content-length", str(len(data)))]
        if status in _FINAL:  # a session that ended, a request refused as it is: retrying cannot help
            headers.append(("x-should-retry", "false"))
        if close:
            headers.append(("connection", "close"))
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)))
        writer.write(conn.send(h11.Data(data=data)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()

    @staticmethod
    def _http() -> Any:
        return _SERVING.get().http()

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


__all__ = ["BadRequest", "Exchange", "Gateway", "Route", "UpstreamError", "gateway", "refusal"]
