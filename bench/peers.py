"""The configurations `overhead.py` compares: the bare SDK, otel-budget in a budgeted run, and each peer
instrumentation of the openai SDK (skipped with a note when its package is not installed).

A configuration is timed in the benchmark's process when its uninstrument really restores the SDK (every
method of the openai client and resource classes is the very object it was before); otherwise in a worker
process of its own (`python bench/peers.py --worker NAME`), instrumented once, timed on request.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_budget

sys.path.insert(0, str(Path(__file__).parent))
from workload import CALLS, make_client, timed  # noqa: E402

#: Every limit on (high enough never to stop the run) and the default repeat and stall checks; no content.
BUDGET = otel_budget.Budget(
    max_steps=10**7, max_tool_calls=10**7, max_seconds=10**6, max_input_tokens=10**12,
    max_output_tokens=10**12, max_total_tokens=10**12, max_usd=10**6,
)


@dataclass
class Config:
    name: str
    module: str | None
    """The module the configuration needs (None: always available)."""
    setup: Callable[[TracerProvider], Callable[[], None]]
    """Instrument; returns the undo function."""
    in_run: bool = False

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None


def _bare(tp: TracerProvider) -> Callable[[], None]:
    return lambda: None


def _otel_budget(tp: TracerProvider) -> Callable[[], None]:
    otel_budget.instrument(tracer_provider=tp)
    return otel_budget.uninstrument


def _otel_genai(tp: TracerProvider) -> Callable[[], None]:
    # Content capture is off unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says otherwise.
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp)
    return inst.uninstrument


def _openinference(tp: TracerProvider) -> Callable[[], None]:
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp, config=TraceConfig(hide_inputs=True, hide_outputs=True))
    return inst.uninstrument


def _openllmetry(tp: TracerProvider) -> Callable[[], None]:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"  # read per call
    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp)
    return inst.uninstrument


BARE = Config("bare openai SDK", None, _bare)
OURS = Config("otel-budget, budgeted run", None, _otel_budget, in_run=True)
PEERS = [
    Config("OTel contrib GenAI (openai-v2)", "opentelemetry.instrumentation.openai_v2", _otel_genai),
    Config("OpenInference", "openinference.instrumentation.openai", _openinference),
    Config("OpenLLMetry", "opentelemetry.instrumentation.openai", _openllmetry),
]
BY_NAME = {c.name: c for c in [BARE, OURS, *PEERS]}

# --- is the SDK as imported? ------------------------------------------------------------------------------


@functools.cache
def _patchable() -> list[tuple[str, type]]:
    """The openai client and resource classes (where instrumentations patch), imported."""
    return list(_classes())


def _classes() -> Iterator[tuple[str, type]]:
    names = ["openai", "openai._base_client", "openai._client", "openai._streaming"]
    names += [m.name for m in pkgutil.walk_packages(openai.resources.__path__, "openai.resources.")]
    for name in names:
        module = importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == name:
                yield f"{name}.{attr}", value


def snapshot() -> dict[str, int]:
    """Identity of every callable attribute of those classes."""
    return {
        f"{where}.{attr}": id(value)
        for where, cls in _patchable()
        for attr, value in vars(cls).items()
        if callable(value) or isinstance(value, (classmethod, staticmethod, property))
    }


def leftovers(before: dict[str, int]) -> list[str]:
    """Attributes added, removed or replaced since `before`."""
    after = snapshot()
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


# --- timing one configuration -----------------------------------------------------------------------------


class Slot:
    """One configuration instrumented on a tracer provider with an in-memory exporter, ready to time."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.exporter = InMemorySpanExporter()
        self.tp = TracerProvider()
        self.tp.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.client = make_client()

    @contextmanager
    def on(self) -> Iterator[None]:
        undo = self.config.setup(self.tp)
        try:
            with ExitStack() as stack:
                if self.config.in_run:
                    stack.enter_context(otel_budget.run("bench", budget=BUDGET))
                yield
        finally:
            undo()

    def time(self, kind: str, n: int) -> float:
        """Microseconds of CPU per call of `kind` (after 3 warm-up calls); checks that spans were made."""
        fn = CALLS[kind]
        timed(fn, self.client, 3)
        self.exporter.clear()
        us = timed(fn, self.client, n)
        if self.config is not BARE and not self.exporter.get_finished_spans():
            raise SystemExit(f"{self.config.name}: no spans were recorded")
        self.exporter.clear()
        return us


class Worker:
    """A configuration in a process of its own, instrumented once; `time` asks it to time a batch."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", config.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )
        self._ask("ready")

    def _ask(self, request: str) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.config.name}: the worker process died")
        return json.loads(line)

    def time(self, kind: str, n: int) -> float:
        return float(self._ask(f"{kind} {n}"))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def probe(config: Config) -> list[str]:
    """In a fresh process: instrument, make one call of each kind, uninstrument; what was left patched."""
    out = subprocess.run([sys.executable, __file__, "--probe", config.name], capture_output=True, text=True,
                         check=True)
    return list(json.loads(out.stdout))


def _main(argv: list[str]) -> None:
    mode, name = argv
    config = BY_NAME[name]
    slot = Slot(config)
    if mode == "--probe":
        before = snapshot()
        with slot.on():
            for kind in CALLS:
                slot.time(kind, 1)
        print(json.dumps(leftovers(before)))
        return
    with slot.on():
        for line in sys.stdin:
            request = line.split()
            result: Any = "ready" if request == ["ready"] else slot.time(request[0], int(request[1]))
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
