"""One life of the Claude Code gateway's server (`_claude_gateway`): from its first session's start to its last
session's end, one daemon thread runs one event loop that listens on loopback. When the last session ends the
server stops listening, its connections are dropped and the thread ends; the next session starts a new one."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

Handler = Callable[["Serving", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
"""Serves one connection."""


class Serving:
    """One life of the gateway's server, from its first session to its last: a thread, its event loop, the
    listening socket, the connections it serves and the HTTP client it forwards with."""

    def __init__(self, handler: Handler) -> None:
        self.loop = asyncio.new_event_loop()
        self.connections: set[asyncio.Task[Any]] = set()
        self.client: Any = None
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.server = self.loop.run_until_complete(asyncio.start_server(
                    lambda r, w: handler(self, r, w), "127.0.0.1", 0, limit=65536))
                self.port = self.server.sockets[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()
                self.loop.close()
                return
            ready.set()
            try:
                self.loop.run_forever()
            finally:
                self.loop.close()

        self.thread = threading.Thread(target=serve, name="otel-budget-claude-gateway", daemon=True)
        self.thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def http(self) -> Any:
        if self.client is None:
            try:
                import httpx2 as httpx  # what the SDK's own dependencies (mcp) bring
            except ImportError:  # pragma: no cover
                import httpx  # type: ignore[no-redef]
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=30.0))
        return self.client

    def stop(self) -> None:
        """Stop listening, drop the connections, end the thread (waits for it unless called on it)."""
        if threading.current_thread() is self.thread:
            self.loop.create_task(self._close())
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - the gateway is going away either way
            log.debug("otel-budget: the Claude Code gateway did not close cleanly", exc_info=True)
        self.thread.join(timeout=10)

    async def _close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        if self.client is not None:
            await self.client.aclose()
        self.loop.call_soon(self.loop.stop)


__all__ = ["Handler", "Serving"]
