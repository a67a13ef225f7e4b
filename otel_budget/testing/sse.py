"""Server-sent events over HTTP/1.1 chunked transfer encoding, with scripted failures."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any

from .turns import Turn

Event = tuple[str | None, Any]
"""An SSE event: optional ``event:`` name and its data (a JSON-able value or a raw string)."""

MALFORMED_DATA = "{this is not json"


def encode_event(name: str | None, data: Any) -> bytes:
    """One SSE event as bytes."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {payload}\n\n".encode()


def with_failures(events: list[Event], turn: Turn) -> list[Event]:
    """Insert the malformed event that the turn asks for (after the first event)."""
    if not turn.malformed or not events:
        return events
    follower = events[1][0] if len(events) > 1 else events[0][0]
    return [events[0], (follower, MALFORMED_DATA), *events[1:]]


def write_stream(handler: BaseHTTPRequestHandler, events: Iterable[Event], turn: Turn) -> None:
    """Send a 200 SSE response; honour ``chunk_delay`` and ``break_stream_after``."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    out = handler.wfile
    try:
        for count, (name, data) in enumerate(with_failures(list(events), turn)):
            if turn.break_stream_after is not None and count >= turn.break_stream_after:
                out.flush()
                _drop(handler)
                return
            if count and turn.chunk_delay > 0:
                time.sleep(turn.chunk_delay)
            body = encode_event(name, data)
            out.write(b"%x\r\n%s\r\n" % (len(body), body))
            out.flush()
        out.write(b"0\r\n\r\n")
        out.flush()
    except OSError:
        handler.close_connection = True


def _drop(handler: BaseHTTPRequestHandler) -> None:
    """Close the connection without ending the chunked body (a dropped stream)."""
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)
