"""What the Claude Code gateway serves, and the bounds it keeps (see docs/security.md, "The Claude gateway").

A request target is normalized before anything is decided on it, the way an HTTP client or the API would read it:
the fragment dropped, percent-escapes decoded once, empty and `.` segments dropped, `..` resolved. Only the
endpoints below are served, and the path sent upstream is rebuilt from the normalized one, so what was checked is
what is sent. Everything else is refused with 404 before its body is read.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Literal
from urllib.parse import quote, unquote

#: The largest request body read (the Messages API's own limit is 32 MB); beyond it the answer is 413.
MAX_BODY = 32 * 1024 * 1024
#: The largest request head (request line and headers) read.
MAX_HEAD = 64 * 1024
#: Seconds a connection may wait for the first byte of its next request before it is closed.
IDLE_TIMEOUT = 60.0
#: Seconds a request (head and body) may take to arrive once its first byte did; a half-sent one is closed then.
REQUEST_TIMEOUT = 60.0
#: Connections served at once; one beyond it is closed as soon as it is accepted.
MAX_CONNECTIONS = 64
#: The per-session secret the CLI sends with every request (through `ANTHROPIC_CUSTOM_HEADERS`).
SECRET_HEADER = "x-otel-budget-key"

Kind = Literal["admit", "free"]

#: (method, normalized path) -> what it is: `admit` costs money and is admitted and metered as a model call; `free`
#: costs nothing and is forwarded as it is. Not served (404), although Claude Code's client knows them:
#: `/v1/complete` (legacy text completions: it costs money and its response carries no usage to meter),
#: `/v1/messages/batches` (billed later, outside any run), files, skills and the admin API.
ENDPOINTS: dict[tuple[str, str], Kind] = {
    ("POST", "/v1/messages"): "admit",
    ("POST", "/v1/messages/count_tokens"): "free",  # the API does not bill token counting
    ("GET", "/v1/models"): "free",  # model discovery
}
_KINDS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "request_too_large"}
_ids = itertools.count(1)
_MODEL_ID = re.compile(r"[A-Za-z0-9._:@-]{1,200}")  # GET /v1/models/{id}: free, one plain segment


def normalize(target: str) -> tuple[list[str], str] | None:
    """The path segments and the query of a request target; None when it is no plain path.

    `/r/v1/./messages`, `/r/v1/x/../messages`, `//r/v1//messages/`, `/r/v1/%6Dessages#frag` all give
    `["r", "v1", "messages"]`. A path still holding `%` after one decoding (double encoding), a backslash, a
    control character, or a `..` above the root is refused.
    """
    target = target.split("#", 1)[0]
    path, _, query = target.partition("?")
    if not path.startswith("/"):
        return None
    decoded = unquote(path, errors="strict")
    if "%" in decoded or "\\" in decoded or any(ord(c) < 0x21 or ord(c) == 0x7F for c in decoded):
        return None
    segments: list[str] = []
    for segment in decoded.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                return None
            segments.pop()
            continue
        segments.append(segment)
    return segments, query


def endpoint(method: str, rest: list[str]) -> tuple[Kind, str] | None:
    """What a request for the path `rest` (after the route) is, and the path to send upstream; None: not served."""
    path = "/" + "/".join(rest)
    kind = ENDPOINTS.get((method, path))
    if kind is not None:
        return kind, path
    if method == "GET" and len(rest) == 3 and rest[:2] == ["v1", "models"] and _MODEL_ID.fullmatch(rest[2]):
        return "free", "/v1/models/" + quote(rest[2], safe="")
    return None


def served() -> str:
    """The endpoints served, for an error message."""
    return ", ".join(f"{method} {path}" for method, path in ENDPOINTS) + ", GET /v1/models/{id}"


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


def content_length(request: Any) -> int | None:
    """The request's declared body length (None: chunked); h11 has checked it is a number."""
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return None if any(name == b"transfer-encoding" for name, _ in request.headers) else 0


def error_body(status: int, message: str) -> bytes:
    kind = _KINDS.get(status, "api_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()



__all__ = [
    "ENDPOINTS", "IDLE_TIMEOUT", "MAX_BODY", "MAX_CONNECTIONS", "MAX_HEAD", "REQUEST_TIMEOUT", "SECRET_HEADER",
    "content_length", "endpoint", "error_body", "normalize", "refusal", "served",
]
