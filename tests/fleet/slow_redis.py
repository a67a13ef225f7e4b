"""A slow Redis for the fault tests: a real server kept busy by a script, and a loopback proxy that delays bytes."""

from __future__ import annotations

import collections
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

import redis

#: Busy-waits ARGV[1] milliseconds on the Redis clock: Redis runs nothing else meanwhile (below lua-time-limit).
_BUSY = """
local function ms() local t = redis.call('TIME') return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 end
local start = ms()
while ms() - start < tonumber(ARGV[1]) do end
return 1
"""


def answers(port: int, timeout: float = 0.05) -> bool:
    """Whether Redis answers a PING within `timeout` seconds."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def busy(port: int, seconds: float) -> Iterator[None]:
    """Keep the Redis on `port` busy running a script for `seconds`; the body runs while it is busy, and the
    block ends only when the script has finished (Redis then runs what queued up behind it)."""
    client = redis.Redis(port=port, socket_timeout=seconds + 30)
    thread = threading.Thread(target=client.eval, args=(_BUSY, 0, int(seconds * 1000)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while answers(port, timeout=0.5):  # a generous timeout: a loaded machine is not mistaken for a busy Redis
        if time.monotonic() > deadline:
            raise RuntimeError("Redis never became busy")
    try:
        yield
    finally:
        thread.join(seconds + 30)
        client.close()


def evalsha_seen(client: redis.Redis) -> int:
    """EVALSHA commands this Redis has processed (`calls` counts the failed ones too; rejected ones apart)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)) + int(stats.get("rejected_calls", 0))


class DelayProxy:
    """A TCP proxy on 127.0.0.1 in front of a Redis that can hold back the bytes of either direction.

    `up` delays what clients send to Redis, `down` what Redis replies (seconds). A chunk is forwarded at its
    arrival plus the delay in force when it arrived, in order per connection and direction. What a client
    sent before it hung up is still delivered, so Redis runs it after the client gave up.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.up = 0.0
        self.down = 0.0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self._cond = threading.Condition()
        self._queued = 0
        self._evalsha = 0
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def evalsha_forwarded(self) -> int:
        """EVALSHA commands delivered to Redis so far."""
        with self._cond:
            return self._evalsha

    def idle(self, timeout: float = 30.0) -> None:
        """Wait until every chunk received so far has been forwarded."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queued == 0, timeout):
                raise TimeoutError("the proxy still holds bytes")

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            for src, dst, attr in ((client, upstream, "up"), (upstream, client, "down")):
                pipe: collections.deque[tuple[float, bytes | None]] = collections.deque()
                ready = threading.Condition()
                for target in (self._read, self._write):
                    t = threading.Thread(target=target, args=(src, dst, attr, pipe, ready), daemon=True)
                    t.start()
                    self._threads.append(t)

    def _read(self, src: socket.socket, dst: socket.socket, attr: str, pipe: collections.deque, ready: threading.Condition) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self._cond:
                self._queued += 1
            with ready:
                pipe.append((time.monotonic() + getattr(self, attr), data or None))
                ready.notify()
            if not data:
                return

    def _write(self, src: socket.socket, dst: socket.socket, attr: str, pipe: collections.deque, ready: threading.Condition) -> None:
        while True:
            with ready:
                ready.wait_for(lambda: bool(pipe))
                due, data = pipe.popleft()
            time.sleep(max(0.0, due - time.monotonic()))
            if data is not None:
                try:
                    dst.sendall(data)
                except OSError:
                    pass  # the client hung up: its reply is dropped
            with self._cond:
                self._queued -= 1
                if attr == "up" and data is not None:
                    self._evalsha += data.count(b"\r\nEVALSHA\r\n")
                self._cond.notify_all()
            if data is None:
                return  # the sender hung up; the other side stays open until the proxy closes

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        for s in self._sockets:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
