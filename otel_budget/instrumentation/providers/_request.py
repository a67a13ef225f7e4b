"""The one wrapper shape shared by Stainless-generated SDKs (openai, anthropic): patch `Client.request`.

Patching the client's request choke point covers every public path at once (create, parse, the `.stream()`
helpers, `stream=True`, sync and async) with two patch points per SDK. The adapter only translates.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from ...core import calls, config
from ...core.in_flight import RoomPending, may_await_room
from ...telemetry.peers import mark_refused
from .._peers import sending, touches
from .._spec import PatchPoint
from . import _params, _stream_usage, _wire
from ._raw import RawResponse, is_raw
from ._stream import Accumulator, AsyncStream, RawStreamResponse, SyncStream

log = logging.getLogger(__name__)
T = TypeVar("T")


class Adapter(Protocol):
    """Translates one SDK's requests and responses; decides nothing."""

    def describe(self, options: Any, stream: bool) -> calls.ModelCall | None:
        """The call an SDK request makes, or None when it is not a model call we meter."""

    def prepare(self, options: Any, call: calls.ModelCall, guard: calls.Guard | None) -> None:
        """Apply what the enforcer asked for (output limit, usage in streams) to the request; the shared wrapper
        lowers the timeout to the time the run has left (`lower_timeout`)."""

    def without_usage(self, options: Any, guard: calls.Guard) -> bool:
        """Put back a request the server rejected for the stream usage option we added; False: it cannot."""

    def read(self, result: Any, call: calls.ModelCall) -> None:
        """Fill usage, response model, tool calls from a non-streamed result."""

    def accumulator(self, call: calls.ModelCall, options: Any) -> Accumulator:
        """A reader for this call's stream."""

    def summarizer(self, client: Any, call: calls.ModelCall) -> Any:
        """A function (prompt, max_tokens) -> text (or awaitable) that asks the same model, without tools."""


def _split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, bool]:
    options = args[1] if len(args) > 1 else kwargs.get("options")
    stream = kwargs.get("stream", args[2] if len(args) > 2 else False)
    return options, bool(stream)


def _capture(adapter: Adapter, instance: Any, call: calls.ModelCall, options: Any) -> Any:
    """The request's content: (system instructions, messages) when the adapter reads them, else its JSON."""
    content = getattr(adapter, "content", None)
    if content is not None and isinstance(options.json_data, dict):
        return content(options)
    try:
        return json.dumps(options.json_data, default=str)
    except Exception:  # noqa: BLE001
        return repr(options.json_data)


def _start(adapter: Adapter, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]):  # type: ignore[no-untyped-def]
    """Describe and admit the call; returns (guard, call, options, stream) or None to pass through."""
    try:
        options, stream = _split(args, kwargs)
        call = adapter.describe(options, stream) if options is not None else None
    except Exception:  # noqa: BLE001 - our bug: the original call goes through unchanged
        log.warning("otel-budget: could not read a request; sending it unmetered", exc_info=True)
        return None
    if call is None:
        return None
    base_url = _base_url(instance)
    call.server = _params.server(base_url)
    if call.stream and base_url is not None:
        call.base_url = _url_text(base_url)
    size = _wire.RequestSize(options, _wire.encoder(instance))
    try:
        # (module functions and their arguments: a partial or a lambda per call costs more than the tuple)
        guard = calls.begin(call, size, _safe, _capture, (adapter, instance, call, options))
        # BudgetExceeded / UnknownPriceError propagate: a budget decision
    except calls.BudgetExceeded as exc:
        mark_refused(call.operation, call.model, exc.reason.value, exc.limit)
        raise
    try:
        adapter.prepare(options, call, guard)
        if guard is not None and guard.deadline != math.inf:
            lower_timeout(options, guard.timeout, _client_timeout(instance))
    except Exception:  # noqa: BLE001
        log.warning("otel-budget: could not adjust a request", exc_info=True)
    return guard, call, options, stream, size


#: Client classes whose `base_url` property returns an attribute of the client's own (checked on the first client of
#: each class): the name of that attribute (`_base_url`; `_configured_base_url` in newer openai SDKs), read from the
#: instance's dict, since the openai SDK's property runs an import statement on every read; "" when the property
#: returns anything else (read through it).
_PLAIN_BASE_URL: dict[type, str] = {}
_OWN_BASE_URL = ("_base_url", "_configured_base_url")


def _base_url(instance: Any) -> Any:
    """The client's base URL (`instance.base_url`), read without its property when that only returns it."""
    cls = type(instance)
    own = _PLAIN_BASE_URL.get(cls)
    if own is None:
        return _first_base_url(instance, cls)
    if own:
        url = instance.__dict__.get(own)
        if url is not None:
            return url
    return getattr(instance, "base_url", None)


def _first_base_url(instance: Any, cls: type) -> Any:
    """`_base_url` for the first client of its class: reads the property and learns whether it only returns an
    attribute of the client's own."""
    url = getattr(instance, "base_url", None)
    attrs = getattr(instance, "__dict__", {})
    found = next((name for name in _OWN_BASE_URL if url is not None and attrs.get(name) is url), "")
    if len(_PLAIN_BASE_URL) < 64:  # a handful of client classes; never grows without bound
        _PLAIN_BASE_URL[cls] = found
    return url


#: The last base URL object and its text: a stream's call records it as a string (a URL object's text is built by
#: Python code in httpx), and a client's URL object is the same call after call.
_last_url: tuple[Any, str] = (None, "")


def _url_text(base_url: Any) -> str:
    global _last_url
    last = _last_url
    if base_url is last[0]:
        return last[1]
    text = str(base_url)
    _last_url = (base_url, text)
    return text


def _safe(adapter: Adapter, instance: Any, call: calls.ModelCall, options: Any) -> Any:
    try:
        return adapter.summarizer(instance, call)
    except Exception:  # noqa: BLE001
        return None


def _after(adapter: Adapter, guard: calls.Guard, call: calls.ModelCall, options: Any, result: Any,
           stream: bool, is_async: bool, size: _wire.RequestSize) -> Any:
    if _is_stream(result):
        size.sent(result)
        acc = adapter.accumulator(call, options)
        watch = getattr(acc, "watch", None)
        if watch is not None:
            watch(result)
        return (AsyncStream if is_async else SyncStream)(result, guard, acc)
    if not isinstance(result, BaseModel) and is_raw(result):  # never parsed for the caller: read from what it parses
        size.sent(result)
        if stream:  # the body is the stream
            return RawStreamResponse(result, guard, adapter.accumulator(call, options), is_async)
        return RawResponse(result, guard, partial(_read_parsed, adapter, call))
    try:
        adapter.read(result, call)
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not read a response", exc_info=True)
    guard.finish()
    return result


def _read_parsed(adapter: Adapter, call: calls.ModelCall, parsed: Any) -> None:
    adapter.read(parsed, call)


def _without_usage(adapter: Adapter, options: Any, guard: calls.Guard, instance: Any, size: _wire.RequestSize) -> bool:
    """The request as the caller made it (see Adapter.without_usage), its timeout the time the run has left now."""
    size.restore(options)
    if not adapter.without_usage(options, guard):
        return False
    if guard.deadline != math.inf:
        lower_timeout(options, guard.timeout, _client_timeout(instance))
    return True


def _is_stream(result: Any) -> bool:
    name = type(result).__name__
    return name in ("Stream", "AsyncStream")


_IN_CALL = calls.in_call()


def sync_wrapper(adapter: Adapter):  # type: ignore[no-untyped-def]
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _IN_CALL.get() or not config.get().instrumented:  # nested, or a wrapper left behind
            return wrapped(*args, **kwargs)
        started = _start(adapter, instance, args, kwargs)
        if started is None:
            return wrapped(*args, **kwargs)
        guard, call, options, stream, size = started
        if guard is None:
            return wrapped(*args, **kwargs)
        send = wrapped
        if call.injected_usage:  # a server may reject the stream_options we added: sent once more without them
            send = _stream_usage.resending(wrapped, guard, partial(_without_usage, adapter, options, guard, instance, size))
        if touches(wrapped):  # another instrumentor's wrapper inside ours, or gated above (see _peers)
            with sending(wrapped):
                result = guard.send(send, *args, **kwargs)
        elif _wire.sends_straight(wrapped):  # the SDK's own request: it gets the body serialized once (_wire)
            size.hand_off(options)
            try:
                result = guard.send(send, *args, **kwargs)
            finally:
                size.restore(options)
        else:
            result = guard.send(send, *args, **kwargs)
        return _after(adapter, guard, call, options, result, stream, False, size)

    return wrapper


def async_wrapper(adapter: Adapter):  # type: ignore[no-untyped-def]
    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _IN_CALL.get() or not config.get().instrumented:
            return await wrapped(*args, **kwargs)
        started = await admit_async(partial(_start, adapter, instance, args, kwargs))
        if started is None:
            return await wrapped(*args, **kwargs)
        guard, call, options, stream, size = started
        if guard is None:
            return await wrapped(*args, **kwargs)
        send = wrapped
        if call.injected_usage:
            send = _stream_usage.aresending(wrapped, guard, partial(_without_usage, adapter, options, guard, instance, size))
        if touches(wrapped):
            with sending(wrapped):
                result = await guard.asend(send, *args, **kwargs)
        elif _wire.sends_straight(wrapped):
            size.hand_off(options)
            try:
                result = await guard.asend(send, *args, **kwargs)
            finally:
                size.restore(options)
        else:
            result = await guard.asend(send, *args, **kwargs)
        return _after(adapter, guard, call, options, result, stream, True, size)

    return wrapper


async def admit_async(start: Callable[[], T]) -> T:
    """Run `start` (which admits a call) in an asyncio task: when the call does not fit only because of what
    calls in flight hold, await one of them settling and admit again, instead of refusing (see RunNode.admit)."""
    flag = may_await_room()
    until: float | None = None  # one bound for all the waits of this call (see RunNode.wait_until)
    while True:
        token = flag.set(True)
        try:
            return start()
        except RoomPending as pending:
            until = pending.node.wait_until() if until is None else until
            settled = await pending.wait(until)
        finally:
            flag.reset(token)
        if not settled:
            return start()  # nothing settled in time: admit once more without waiting (a refusal, likely)


_PHASES = ("connect", "read", "write", "pool")


def lower_timeout(options: Any, seconds: float | None, client_timeout: Any = None) -> None:
    """Bound the request's timeout (the SDK's per-attempt timeout) by `seconds`, the time the run has left: each
    phase becomes the smaller of its own and the time left, so a timeout is lowered, never raised. A request that
    names no timeout (NotGiven, a falsy sentinel) goes out with its client's, `client_timeout` (None: no timeout
    at all, or not known): the request is written only when a phase must be lowered, so within the time left it
    keeps the client's (the client's 5 s connect timeout, its 600 s read timeout) without a write per call."""
    if seconds is None:
        return
    current = options.timeout
    if current is not None and not isinstance(current, (int, float)) and not current:  # NotGiven: the client's
        current = client_timeout
    if current is None:  # no timeout at all
        options.timeout = seconds
    elif isinstance(current, (int, float)) and not isinstance(current, bool):
        if current > seconds:
            options.timeout = seconds
    else:
        try:  # httpx's Timeout: one bound per phase
            phases = (current.connect, current.read, current.write, current.pool)
        except AttributeError:  # a type we cannot read
            options.timeout = seconds
            return
        connect, read, write, pool = phases
        if (None not in phases and connect <= seconds and read <= seconds and write <= seconds  # type: ignore[operator]
                and pool <= seconds):  # type: ignore[operator]
            return  # every phase is within the time left already (compared one by one: max() costs more in C)
        try:
            options.timeout = type(current)(**_lowered(phases, seconds))
        except Exception:  # noqa: BLE001 - an unknown Timeout type: one bound for every phase
            options.timeout = seconds


def _lowered(phases: tuple[Any, ...], seconds: float) -> dict[str, Any]:
    """Each phase of a timeout bounded by `seconds` (apart from `lower_timeout`: a comprehension there would make
    `seconds` a cell on every call)."""
    return {phase: seconds if p is None or p > seconds else p for phase, p in zip(_PHASES, phases, strict=True)}


def _client_timeout(instance: Any) -> Any:
    """The client's timeout, which the SDK uses for a request that names none (None: no timeout, or not known)."""
    return getattr(instance, "timeout", None)


def retry_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Wraps the SDK's `_calculate_retry_timeout(remaining_retries, options, headers)`, asked before each retry
    sleep with the options the next attempt copies: that attempt gets the time left after the sleep as its
    timeout, and a retry that would start after the run's deadline is not made (the guard raises the time stop).
    """
    delay = wrapped(*args, **kwargs)
    guard = calls.sending()
    if guard is None:
        return delay
    timeout = guard.retry_timeout(float(delay))  # RetryCut: a budget decision, it propagates
    try:
        options = args[1] if len(args) > 1 else kwargs.get("options")
        if options is not None:
            lower_timeout(options, timeout, _client_timeout(instance))
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: could not lower a retry's timeout", exc_info=True)
    return delay


def client_points(base_client: str, adapter: Adapter) -> tuple[PatchPoint, ...]:
    """The patch points of an SDK built like openai's and anthropic's (`base_client`: its `_base_client` module).

    `SyncAPIClient.request` / `AsyncAPIClient.request`, and every subclass's own `request`: another instrumentor
    (OpenInference) may already have put a wrapper on a subclass such as `OpenAI`, which calls the original base
    method directly; wrapping it too keeps the budget enforced whatever the order. A call passing two of our
    wrappers is counted once (the inner one passes nested calls through). And `BaseClient._calculate_retry_timeout`:
    the SDK's own retries, bounded by the run's deadline (see `retry_wrapper`)."""
    return (PatchPoint(base_client, "SyncAPIClient.request", sync_wrapper(adapter), subclasses=True),
            PatchPoint(base_client, "AsyncAPIClient.request", async_wrapper(adapter), subclasses=True),
            PatchPoint(base_client, "BaseClient._calculate_retry_timeout", retry_wrapper))
