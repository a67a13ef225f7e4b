"""Raw responses of non-streamed calls (`with_raw_response`, `with_streaming_response`): read when the caller parses.

We never parse, read or wait on a body for the caller: its own `parse()` hands us the parsed result, and a body it
only reads as bytes or text is settled with the estimate when the response is closed or garbage-collected.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import wrapt

from ...core.calls import Guard
from ._on_collect import detach, on_collect

log = logging.getLogger(__name__)


def is_raw(result: Any) -> bool:
    """A Stainless SDK raw response (`APIResponse`, `AsyncAPIResponse`, `LegacyAPIResponse`), not a parsed model."""
    return hasattr(result, "parse") and hasattr(result, "http_response")


class RawResponse(wrapt.ObjectProxy):  # type: ignore[misc]
    """Proxy of a raw response: the call is read from the first default `parse()` the caller makes (sync or
    awaited), else settled with the estimate on `close()` or when the response is dropped."""

    def __init__(self, wrapped: Any, guard: Guard, read: Callable[[Any], None]) -> None:
        super().__init__(wrapped)
        self._self_guard = guard
        self._self_read = read
        self._self_final = on_collect(self, guard.abandon)

    def _self_settle(self, parsed: Any) -> Any:
        if detach(self._self_final) is not None:
            try:
                self._self_read(parsed)
            except Exception:  # noqa: BLE001 - our bug must not break the caller
                log.debug("otel-budget: could not read a response", exc_info=True)
            self._self_guard.finish()
        return parsed

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        try:
            result = self.__wrapped__.parse(*args, **kwargs)
        except Exception:
            self._self_rejected()
            raise
        if args or kwargs.get("to") is not None:  # parsed into the caller's own type: not the API's answer
            return result
        if inspect.isawaitable(result):
            return self._self_parse_async(result)
        return self._self_settle(result)

    async def _self_parse_async(self, awaitable: Any) -> Any:
        try:
            parsed = await awaitable
        except Exception:
            self._self_rejected()
            raise
        return self._self_settle(parsed)

    def _self_rejected(self) -> None:
        """The caller's parser rejected the answer (an SDK `parse()` on a cut answer): settled now with what the
        adapter read from it (else the estimate), not when the response is dropped."""
        if detach(self._self_final) is not None:
            self._self_guard.finish()

    def close(self) -> Any:
        try:
            result = self.__wrapped__.close()
        except BaseException:
            self._self_abandon()
            raise
        if inspect.isawaitable(result):
            return self._self_close_async(result)
        self._self_abandon()
        return result

    async def _self_close_async(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        finally:
            self._self_abandon()

    def _self_abandon(self) -> None:
        if detach(self._self_final) is not None:
            self._self_guard.abandon()
