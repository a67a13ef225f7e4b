"""Stream proxies that settle a call exactly once: exhausted, failed, closed, exited or garbage-collected.

A stream also ends at the run's deadline: the first event read after it closes the stream, settles the call with
what was seen and raises the time stop. An async stream does not wait past the deadline for its next event
either; a sync read waits at most its read timeout (the time the run had left when the call was sent).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import weakref
from types import FunctionType, MappingProxyType
from typing import Any, Protocol

import wrapt

try:
    import anyio
except ImportError:  # pragma: no cover - the async SDKs we wrap all depend on anyio
    anyio = None  # type: ignore[assignment]

from ...core.calls import Guard
from ...model.outcome import BudgetExceeded
from ._on_collect import Watch, detach, fire, on_collect

log = logging.getLogger(__name__)
_NO_DICT: Any = MappingProxyType({})


class Accumulator(Protocol):
    """Reads a provider's stream items into the call record."""

    def feed(self, item: Any) -> bool:
        """Take one item; return False to hide it from the caller."""

    def apply(self) -> None:
        """Write what was seen into the guard's ModelCall."""


def _finish(guard: Guard, acc: Accumulator, error: BaseException | None = None) -> BaseException | None:
    try:
        acc.apply()
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: stream accumulator failed", exc_info=True)
    if error is not None:
        return guard.fail(error)
    guard.finish()
    return None


def _expired(guard: Guard, acc: Accumulator) -> BudgetExceeded:
    try:
        acc.apply()
    except Exception:  # noqa: BLE001
        log.debug("otel-budget: stream accumulator failed", exc_info=True)
    return guard.expire()


def weak_method(obj: Any, name: str) -> Any:
    """`obj.<name>` as a function that holds `obj` weakly, to be set on `obj` itself: a bound method there would
    make a reference cycle, and `obj` (a response and all it holds) would wait for the garbage collector instead of
    going when its last user drops it. An attribute the instance already overrides is taken as it is."""
    func = getattr(type(obj), name, None)
    if type(func) is not FunctionType or name in getattr(obj, "__dict__", _NO_DICT):
        return getattr(obj, name)
    try:
        ref = weakref.ref(obj)
    except TypeError:  # not weakly referable
        return getattr(obj, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        target = ref()
        return None if target is None else func(target, *args, **kwargs)

    return call


#: Stream methods (`__next__`, `__anext__`) that only hand on their generator's (`return self._iterator.__next__()`,
#: as the openai SDK's streams do), checked once each from their code: function -> whether it does.
_FORWARDS: dict[Any, bool] = {}


def _next_of(stream: Any, name: str) -> Any:
    """`stream.<name>` (`__next__` or `__anext__`), or its generator's own when the stream's method only hands that
    on: every chunk then goes through one Python frame less. Any other method (a class patched since, too) is
    called as it is."""
    func = getattr(type(stream), name, None)
    forwards = _FORWARDS.get(func)
    if forwards is None:
        code = getattr(func, "__code__", None)
        forwards = (code is not None and code.co_names == ("_iterator", name) and code.co_varnames == ("self",)
                    and code.co_consts == (None,))
        if len(_FORWARDS) < 64:  # a handful of stream classes; never grows without bound
            _FORWARDS[func] = forwards
    if forwards:
        inner = getattr(getattr(stream, "__dict__", _NO_DICT).get("_iterator"), name, None)
        if inner is not None:
            return inner
    return getattr(stream, name)


def _settle_on_close(stream: Any, final: Watch, reading: list[bool], is_async: bool = False) -> None:
    """The SDK's `.stream()` helpers close the stream's HTTP response directly: that very response's close (a sync
    stream's) or aclose (an async stream's) settles the call too. The response stays the SDK's own object (its type
    is unchanged); only its instance gets a close that also runs `final` (once: a finalizer runs at most once). A
    close while the proxy is reading an item (the SDK closing on an error) is left to the proxy, which settles with
    the error."""
    try:
        response = stream.response
        if not is_async:
            close = weak_method(response, "close")

            def close_and_settle(*args: Any, **kwargs: Any) -> Any:
                try:
                    return close(*args, **kwargs)
                finally:
                    if not reading[0]:
                        fire(final)

            response.close = close_and_settle
            return
        aclose = weak_method(response, "aclose") if getattr(response, "aclose", None) is not None else None
        if aclose is not None:

            async def aclose_and_settle(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await aclose(*args, **kwargs)
                finally:
                    if not reading[0]:
                        fire(final)

            response.aclose = aclose_and_settle
    except Exception:  # noqa: BLE001 - a response we cannot watch is settled by the stream's other paths
        log.debug("otel-budget: could not watch a stream's response", exc_info=True)


class SyncStream(wrapt.ObjectProxy):  # type: ignore[misc]
    """Proxy of a sync SDK stream."""

    def __init__(self, wrapped: Any, guard: Guard, acc: Accumulator) -> None:
        super().__init__(wrapped)
        final = on_collect(self, guard.abandon)
        guard.reader = acc
        reading = [False]
        deadline = guard.deadline
        #: What every `__next__` reads, in one attribute (each attribute of a proxy is set apart): the stream's own
        #: `__next__`, the reader's `feed`, the reading flag, the deadline or None.
        self._self_hot = (_next_of(wrapped, "__next__"), acc.feed, reading, None if deadline == math.inf else deadline)
        #: What the stream's end reads: the guard, the reader and the watch that settles the call when the proxy is
        #: dropped.
        self._self_end = (guard, acc, final)
        _settle_on_close(wrapped, final, reading)

    def __iter__(self) -> SyncStream:
        return self

    def __next__(self) -> Any:
        nxt, feed, reading, deadline = self._self_hot
        while True:
            reading[0] = True  # the SDK may close the response while it reads: this path settles then
            try:
                item = nxt()
            except StopIteration:
                guard, acc, final = self._self_end
                detach(final)
                _finish(guard, acc)
                raise
            except BaseException as exc:
                guard, acc, final = self._self_end
                detach(final)
                replaced = _finish(guard, acc, exc)
                if replaced is None or replaced is exc:
                    raise
                raise replaced from exc
            finally:
                reading[0] = False
            try:
                visible = feed(item)
            except Exception:  # noqa: BLE001 - a parsing bug of ours never breaks the caller's stream
                log.debug("otel-budget: could not read a stream item", exc_info=True)
                visible = True
            if deadline is not None and time.monotonic() >= deadline:
                raise self._self_expire()
            if visible:
                return item

    def _self_expire(self) -> BudgetExceeded:
        guard, acc, final = self._self_end
        detach(final)
        stop = _expired(guard, acc)
        try:
            self.__wrapped__.close()
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: closing an expired stream failed", exc_info=True)
        return stop

    def _self_settle(self) -> None:
        """Settle with what was seen, unless settled already (the caller is done with the stream)."""
        fire(self._self_end[2])

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_settle()

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncStream(wrapt.ObjectProxy):  # type: ignore[misc]
    """Proxy of an async SDK stream."""

    def __init__(self, wrapped: Any, guard: Guard, acc: Accumulator) -> None:
        super().__init__(wrapped)
        final = on_collect(self, guard.abandon)
        guard.reader = acc
        reading = [False]
        deadline = guard.deadline
        #: As SyncStream's, with the stream's own `__anext__`.
        self._self_hot = (_next_of(wrapped, "__anext__"), acc.feed, reading, None if deadline == math.inf else deadline)
        self._self_end = (guard, acc, final)
        _settle_on_close(wrapped, final, reading, is_async=True)

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> Any:
        nxt, feed, reading, deadline = self._self_hot
        while True:
            silent = False
            reading[0] = True  # the SDK may close the response while it reads: this path settles then
            try:
                if deadline is None or anyio is None:
                    item = await nxt()
                else:
                    with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
                        item = await nxt()
                    silent = scope.cancelled_caught  # no event came before the deadline
            except StopAsyncIteration:
                guard, acc, final = self._self_end
                detach(final)
                _finish(guard, acc)
                raise
            except BaseException as exc:
                guard, acc, final = self._self_end
                detach(final)
                replaced = _finish(guard, acc, exc)
                if replaced is None or replaced is exc:
                    raise
                raise replaced from exc
            finally:
                reading[0] = False
            if silent:
                raise await self._self_expire()
            try:
                visible = feed(item)
            except Exception:  # noqa: BLE001 - a parsing bug of ours never breaks the caller's stream
                log.debug("otel-budget: could not read a stream item", exc_info=True)
                visible = True
            if deadline is not None and time.monotonic() >= deadline:
                raise await self._self_expire()
            if visible:
                return item

    async def _self_expire(self) -> BudgetExceeded:
        guard, acc, final = self._self_end
        detach(final)
        stop = _expired(guard, acc)
        try:
            await self.__wrapped__.close()
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: closing an expired stream failed", exc_info=True)
        return stop

    def _self_settle(self) -> None:
        """Settle with what was seen, unless settled already (the caller is done with the stream)."""
        fire(self._self_end[2])

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_settle()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class RawStreamResponse(wrapt.ObjectProxy):  # type: ignore[misc]
    """Proxy of a raw response (`with_raw_response` / `with_streaming_response`) whose body is a stream:
    `parse()` hands back our stream proxy, so the call is settled from the events the caller reads.
    """

    def __init__(self, wrapped: Any, guard: Guard, acc: Accumulator, is_async: bool) -> None:
        super().__init__(wrapped)
        self._self_guard = guard
        self._self_acc = acc
        self._self_async = is_async
        self._self_parsed: Any = None
        self._self_final = on_collect(self, guard.abandon)
        guard.reader = acc

    def _self_wrap(self, parsed: Any) -> Any:
        if self._self_parsed is None:
            if type(parsed).__name__ not in ("Stream", "AsyncStream"):
                return parsed
            detach(self._self_final)
            cls = AsyncStream if self._self_async else SyncStream
            self._self_parsed = cls(parsed, self._self_guard, self._self_acc)
        return self._self_parsed

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.parse(*args, **kwargs)
        if inspect.isawaitable(result):  # `with_raw_response` of an async client parses synchronously
            return self._self_wrap_async(result)
        return self._self_wrap(result)

    async def _self_wrap_async(self, awaitable: Any) -> Any:
        return self._self_wrap(await awaitable)

    def __enter__(self) -> RawStreamResponse:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self.__wrapped__.__exit__(*exc)

    async def __aenter__(self) -> RawStreamResponse:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc)

    def close(self) -> Any:
        """What `with_streaming_response` calls when its block ends (a coroutine for async clients)."""
        if self._self_async:
            return self._self_aclose()
        try:
            return self.__wrapped__.close()
        finally:
            self._self_closed()

    async def _self_aclose(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_closed()

    def _self_closed(self) -> None:
        """Leaving the block closed the response: a stream not read to its end is settled with what was seen."""
        parsed = self._self_parsed
        if parsed is not None:
            parsed._self_settle()
        else:
            fire(self._self_final)
