"""Usage in OpenAI-shaped chat streams (the openai SDK and LiteLLM): asked for inside runs, and a server that rejects
`stream_options` (DESIGN, Enforcement rules: Streams).

Inside any run a chat stream asks for `stream_options.include_usage` when the caller did not (the stream readers
then hide what only that option adds). A server that answers such a request with an HTTP 400 naming
`stream_options` gets the same request once more without it, within the same call (one step, one span) and only
while the run has time left; its base URL is remembered for the rest of the process, so it is not asked again
(its streams' usage is then estimated, and marked so on their spans).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...core.calls import Guard
from ...model.call import ModelCall

log = logging.getLogger(__name__)

_FIELD = "stream_options"
#: How many base URLs that rejected `stream_options` are remembered (the oldest are forgotten past it).
REMEMBERED_MAX = 1024
#: Base URLs that rejected `stream_options`, oldest first.
REJECTED: dict[str, None] = {}
_lock = threading.Lock()


def remember(base_url: str | None) -> None:
    """This base URL rejected `stream_options`: do not ask it again in this process."""
    if not base_url:
        return
    with _lock:
        REJECTED.pop(base_url, None)
        REJECTED[base_url] = None
        while len(REJECTED) > REMEMBERED_MAX:
            del REJECTED[next(iter(REJECTED))]


def rejected(base_url: str | None) -> bool:
    """True when this base URL rejected `stream_options` earlier in this process."""
    return base_url is not None and base_url in REJECTED


def ask(body: Mapping[str, Any], call: ModelCall, guard: Guard | None) -> dict[str, Any] | None:
    """The `stream_options` to send so that a stream reports its usage (the caller's own, with `include_usage`
    added), or None to leave the request as it is: outside runs, not a stream, the caller asked already, or the
    server is known to reject the field."""
    if not call.stream or guard is None or not guard.needs_usage or rejected(call.base_url):
        return None
    options = body.get(_FIELD)
    if options is not None and not isinstance(options, Mapping):
        return None
    if options and options.get("include_usage"):
        return None
    call.injected_usage = True
    return {**(options or {}), "include_usage": True}


def without_usage(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request as the caller made it, when only our `include_usage` made it carry `stream_options`; None when
    the caller set `stream_options` itself (the server rejects the caller's own field: its error stands)."""
    options = body.get(_FIELD)
    if not isinstance(options, Mapping) or any(k != "include_usage" for k in options):
        return None
    return {k: v for k, v in body.items() if k != _FIELD}


def names_stream_options(error: BaseException) -> bool:
    """An HTTP 400 whose body (or message) names `stream_options`."""
    if getattr(error, "status_code", None) != 400:
        return False
    try:
        text = f"{getattr(error, 'body', '')} {getattr(error, 'message', '')} {error}"
    except Exception:  # noqa: BLE001 - an error we cannot read is not this one
        return False
    return _FIELD in text


def _resend(guard: Guard, error: BaseException, undo: Callable[[], bool]) -> bool:
    """Whether to send the call once more: the server rejected the `stream_options` we added and the run has time
    left. `undo` puts the request back as the caller made it (False: it cannot)."""
    call = guard.call
    if not call.injected_usage or not names_stream_options(error):
        return False
    try:
        remember(call.base_url)
        if time.monotonic() >= guard.deadline or not undo():
            return False
    except Exception:  # noqa: BLE001 - our bug: the server's error goes to the caller as it is
        log.warning("otel-budget: could not send a request again without stream_options", exc_info=True)
        return False
    call.injected_usage = False
    return True


def resending(fn: Callable[..., Any], guard: Guard, undo: Callable[[], bool]) -> Callable[..., Any]:
    """`fn`, sent once more as the caller made it when the server rejects the `stream_options` we added."""

    def send(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not _resend(guard, exc, undo):
                raise
        return fn(*args, **kwargs)

    return send


def aresending(fn: Callable[..., Awaitable[Any]], guard: Guard, undo: Callable[[], bool]) -> Callable[..., Any]:
    """`resending` for a coroutine function."""

    async def send(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            if not _resend(guard, exc, undo):
                raise
        return await fn(*args, **kwargs)

    return send


#: How the usage-only event we asked for shows itself in the server-sent event's JSON (no answer in it).
_NO_CHOICES = ('"choices":[]', '"choices": []')


def _usage_only(data: str) -> dict[str, Any] | None:
    """The parsed JSON of a usage-only chat chunk (no choices, a usage object, no error), else None. Called only for
    an event whose text shows no choices (`_NO_CHOICES`)."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    if (type(parsed) is dict and parsed.get("choices") == [] and isinstance(parsed.get("usage"), dict)
            and not parsed.get("error")):
        return parsed
    return None


#: The SDK decoder class -> its subclass that skips the usage-only event (made once).
_SKIPPING: dict[type, type] = {}
_TAKE = "_otel_budget_take"


def _skipping(base: Any) -> type:
    no_choices, spaced = _NO_CHOICES

    class SkippingUsage(base):  # type: ignore[valid-type,misc]
        """The SDK's decoder, which hands the usage-only event to the reader instead of yielding it."""

        def decode(self, line: str) -> Any:
            sse = base.decode(self, line)
            if sse is not None:
                data = sse.data
                if no_choices in data or spaced in data:
                    parsed = _usage_only(data)
                    if parsed is not None:
                        self.__dict__[_TAKE](parsed)
                        return None  # (the decoder's reading loop yields only what is truthy)
            return sse

    return SkippingUsage


def skip_usage_event(decoder: Any, take: Callable[[dict[str, Any]], None]) -> None:
    """From now on, hand the usage-only chunk that only our `include_usage` asked for to `take` straight from its
    server-sent event, and leave it out of the events the SDK's stream reads (`decoder`: its `SSEDecoder`, whose
    reading loop drops the events `decode` maps to None). The caller never sees that chunk anyway (the reader hides
    it), and the SDK building a chunk object from it costs as much as a chunk of the answer.

    The server sends that chunk after the answer's last one, so the reader calls this when the answer's first finish
    reason arrives: the answer's own events reach the SDK with no step of ours in between. Then the decoder becomes
    the SDK's own with one method more (its class is swapped for a subclass: an attribute set on the instance would
    make every decoder's `self.decode` slow to look up), through which the last lines pass. An event that is not
    plainly usage-only goes to the SDK as before; a usage-only chunk sent earlier reaches the reader, which hides it
    all the same."""
    base = type(decoder)
    cls = _SKIPPING.get(base)
    if cls is None:
        cls = _SKIPPING.setdefault(base, _skipping(base))
    try:
        decoder.__class__ = cls  # (its attributes move into a dict of its own: the class's shared layout is untouched)
        decoder.__dict__[_TAKE] = take
    except Exception:  # noqa: BLE001 - a decoder that cannot take them: the SDK builds the chunk, as before
        with contextlib.suppress(Exception):
            decoder.__class__ = base
        log.debug("otel-budget: could not watch a stream's events", exc_info=True)
