"""A real Prometheus and an OpenTelemetry /metrics endpoint on 127.0.0.1, for live tests and the dashboard picture.

Both are context managers that stop what they start, also when the body raises.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback only)
        return json.loads(response.read())


class MetricsEndpoint:
    """An OTel MeterProvider whose PrometheusMetricReader is served on http://127.0.0.1:<port>/metrics."""

    def __init__(self, service_name: str = "otel-budget-test") -> None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry()
        self.reader = PrometheusMetricReader(registry=self.registry)
        self.meter_provider = MeterProvider(
            metric_readers=[self.reader], resource=Resource.create({"service.name": service_name})
        )
        self.port = free_port()
        self._server: Any = None

    @property
    def target(self) -> str:
        """host:port for a Prometheus scrape config."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> MetricsEndpoint:
        from prometheus_client import start_http_server

        self._server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.meter_provider.shutdown()

    def scrape(self) -> str:
        """The /metrics text, as Prometheus would read it."""
        with urllib.request.urlopen(f"http://{self.target}/metrics", timeout=5) as response:  # noqa: S310
            return response.read().decode()


class PrometheusProcess:
    """`prometheus` (Debian 2.42) on a free loopback port, with its own config, rules and data directory."""

    def __init__(
        self,
        targets: list[str],
        rules: list[dict[str, Any]] | None = None,
        interval: str = "1s",
        ready_timeout: float = 30.0,
    ) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is missing: run scripts/ensure_services.sh (make test does)")
        self.binary = binary
        self.targets = targets
        self.rules = rules or []
        self.interval = interval
        self.ready_timeout = ready_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusProcess:
        self._tmp = tempfile.TemporaryDirectory(prefix="otel-budget-prom-")
        try:
            self._start(Path(self._tmp.name))
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()

    def _start(self, root: Path) -> None:
        rule_files = []
        for i, group_doc in enumerate(self.rules):
            path = root / f"rules-{i}.yaml"
            path.write_text(yaml.safe_dump(group_doc))
            rule_files.append(str(path))
        config = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": rule_files,
            "scrape_configs": [{"job_name": "otel-budget", "static_configs": [{"targets": self.targets}]}],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = root / "prometheus.log"
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after {self.ready_timeout}s: {self.log()}")
            time.sleep(0.1)

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def log(self) -> str:
        """The last lines Prometheus wrote (for failure messages)."""
        try:
            return self.log_path.read_text()[-2000:]
        except OSError:
            return ""

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path> and return its `data`."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = _get_json(f"{self.url}/api/v1/{path}{query}")
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        return list(self.api("query", query=expr)["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query; the result matrix."""
        return list(self.api("query_range", query=expr, start=start, end=end, step=step)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts that are pending or firing now."""
        return list(self.api("alerts")["alerts"])

    def targets_up(self) -> bool:
        """Whether every scrape target has been scraped successfully at least once."""
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)
