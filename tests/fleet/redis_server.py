"""A real redis-server on 127.0.0.1 and a free port, started and stopped by the tests (also on failure)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

#: A Redis Cluster node also listens on its port + 10000 (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, bus: bool = False) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now; with `bus`, one whose cluster bus port
    (port + 10000) is a valid port (at most 65535) and free too."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not bus or (port + CLUSTER_BUS_OFFSET <= 65535 and _bindable(port + CLUSTER_BUS_OFFSET)):
            return port
    raise RuntimeError("no free port with a free cluster bus port on 127.0.0.1")


class RedisServer:
    """`redis-server` without persistence, daemonized with a pidfile in its own temp dir.

    `stop()` and `start()` may be called again to simulate an outage and a restart on the same port.
    """

    def __init__(self, *, cluster: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        self.binary = binary
        self.cluster = cluster
        self.port = free_port(bus=cluster)
        self.dir = Path(tempfile.mkdtemp(prefix="otel-budget-redis-"))
        self.pidfile = self.dir / "redis.pid"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "yes", "--pidfile", str(self.pidfile), "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
        ]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / "nodes.conf")]
        subprocess.run(args, check=True, timeout=10)
        deadline = time.monotonic() + 30
        while not self._ping():
            if time.monotonic() > deadline:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not answer on port {self.port}:\n{log}")
            time.sleep(0.02)
        if self.cluster:
            import redis

            client = redis.Redis(port=self.port)
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            while client.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the one-node cluster on port {self.port} did not become ready")
                time.sleep(0.05)
            client.close()
        return self

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Kill the server (SIGKILL: an abrupt outage) and wait until the port is closed."""
        import os
        import signal

        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self._ping() and time.monotonic() < deadline:  # a killed process closes its sockets at once
            time.sleep(0.02)
        self.pidfile.unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
