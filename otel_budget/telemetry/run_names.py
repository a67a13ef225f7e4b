"""Run names as metric labels: a bounded set of them, and the utilization gauge's points.

A run name is a label on every run metric, so each distinct name is a series (seven of them on the utilization
gauge). The set of names is bounded: past `MAX_RUN_NAMES`, a new name is recorded as `RUN_NAME_OTHER` in metrics
(spans keep the real name), with one warning, instead of silently landing in the SDK's overflow series at 2,000
attribute sets. The gauge reports zero for a name whose runs all ended only for `ZERO_SECONDS`, not forever.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from . import semconv as sc

log = logging.getLogger(__name__)

#: Distinct run names that get their own series; 250 keeps the gauge (7 points a name) under the SDK's 2,000.
MAX_RUN_NAMES = 250
#: How long the gauge reports 0 for a name after its last run ended (Prometheus' staleness window), then nothing.
ZERO_SECONDS = 300.0


class RunNames:
    """The names seen (bounded), the active runs and when each name's last run ended."""

    def __init__(self, limit: int = MAX_RUN_NAMES, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._known: set[str] = set()
        self._active: weakref.WeakSet[Any] = weakref.WeakSet()
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()
        self._warned = False

    def label(self, name: str | None) -> str:
        """The metric label of a run name: the name while the set has room for it, else `RUN_NAME_OTHER`."""
        if name is None or name in self._known:
            return name or ""
        with self._lock:
            if name in self._known or len(self._known) < self.limit:
                self._known.add(name)
                return name
            warn, self._warned = not self._warned, True
        if warn:
            log.warning("otel-budget: more than %d distinct run names (the newest: %r); runs with a new name are "
                        "counted as run_name=%r in metrics from now on (their spans keep the name). Give a run a name "
                        "per kind of task, never per request: put ids in conversation_id or span attributes.",
                        self.limit, name[:80], sc.RUN_NAME_OTHER)
        return sc.RUN_NAME_OTHER

    def started(self, node: Any) -> None:
        self.label(node.name)
        with self._lock:
            self._active.add(node)

    def ended(self, node: Any) -> str:
        """A run ended: its label (the gauge reports 0 for it a while, unless another run of it is active)."""
        label = self.label(node.name)
        with self._lock:
            self._active.discard(node)
            self._ended[label] = self.clock()
        return label

    def observe(self, options: CallbackOptions | None = None) -> Iterable[Observation]:
        """The utilization gauge: the highest utilization per (name, dimension) among active runs; 0 for a name
        whose runs ended less than `ZERO_SECONDS` ago."""
        now = self.clock()
        with self._lock:
            nodes = list(self._active)
            self._ended = {name: at for name, at in self._ended.items() if now - at < ZERO_SECONDS}
            idle = list(self._ended)
        best: dict[tuple[str, str], float] = {}
        for node in nodes:
            try:
                label = self.label(node.name)
                for dim, value in node.utilization().items():
                    if value > best.get((label, dim), -1.0):
                        best[(label, dim)] = value
            except Exception:  # noqa: BLE001
                log.debug("otel-budget: utilization failed", exc_info=True)
        out = [Observation(v, {sc.LABEL_RUN_NAME: name, sc.LABEL_DIMENSION: dim}) for (name, dim), v in best.items()]
        active = {name for name, _ in best}
        for name in idle:
            if name not in active:
                out.extend(Observation(0.0, {sc.LABEL_RUN_NAME: name, sc.LABEL_DIMENSION: dim}) for dim in sc.SPAN_DIMS)
        return out
