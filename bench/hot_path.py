"""otel-budget's wrapper against itself at another commit, in one process: a precise A/B of a hot-path cut.

The other commit's package is extracted (`git archive`) as `otel_budget_ref` (the package imports itself
relatively), then blocks of each alternate: instrument, open a budgeted run, warm up, time N calls (process CPU
time), close, uninstrument. `wrapper` times the wrapper alone (the SDK's request replaced by a function returning
a parsed completion), `plain` and `stream` the real openai SDK through the in-process transport; the bare SDK is
timed in the same rotation. `--meter` adds an SDK MeterProvider (in-memory reader), as users have one.
Run: `.venv/bin/python bench/hot_path.py --ref HEAD [--kind wrapper] [--meter]`.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).parent))
from workload import _COMPLETION, CALLS, MESSAGES, MODEL, make_client, timed  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def load_ref(ref: str) -> Any:
    """The package as it is at `ref`, importable as `otel_budget_ref`."""
    where = Path(tempfile.mkdtemp(prefix="otel-budget-ref-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "otel_budget"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    (where / "otel_budget").rename(where / "otel_budget_ref")
    sys.path.insert(0, str(where))
    return importlib.import_module("otel_budget_ref")


def budget(pkg: Any) -> Any:
    """Every limit on, high enough never to stop the run (as bench/peers.py)."""
    return pkg.Budget(max_steps=10**7, max_tool_calls=10**7, max_seconds=10**6, max_input_tokens=10**12,
                      max_output_tokens=10**12, max_total_tokens=10**12, max_usd=10**6)


def wrapper_call(pkg: Any) -> Callable[[Any], None]:
    """One call through `pkg`'s wrapper with the SDK's request replaced by a function."""
    from openai._models import FinalRequestOptions
    from openai.types.chat import ChatCompletion

    req = importlib.import_module(pkg.__name__ + ".instrumentation.providers._request")
    oa = importlib.import_module(pkg.__name__ + ".instrumentation.providers.openai")
    result = ChatCompletion.model_validate_json(_COMPLETION)
    options = FinalRequestOptions.construct(  # type: ignore[attr-defined]
        method="post", url="/chat/completions", json_data={"model": MODEL, "messages": MESSAGES}
    )
    wrapper = req.sync_wrapper(oa.OpenAIAdapter())

    def one(_: Any) -> None:
        wrapper(lambda *a, **k: result, None, (ChatCompletion, options), {})

    return one


def block(pkg: Any | None, kind: str, n: int, tp: TracerProvider, mp: Any, exporter: InMemorySpanExporter) -> float:
    """us per call of one block: `pkg` instrumented (None: the bare SDK) in a budgeted run."""
    client = make_client()
    if pkg is None:
        fn = CALLS["plain" if kind == "wrapper" else kind]
        timed(fn, client, 5)
        return timed(fn, client, n)
    fn = wrapper_call(pkg) if kind == "wrapper" else CALLS[kind]
    pkg.instrument(tracer_provider=tp, meter_provider=mp)
    try:
        with pkg.run("bench-hot", budget=budget(pkg)):
            timed(fn, client, 10)
            us = timed(fn, client, n)
    finally:
        pkg.uninstrument()
        exporter.clear()
    return us


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="HEAD", help="the commit to compare the working tree with")
    ap.add_argument("--kind", choices=["wrapper", "plain", "stream"], default="wrapper")
    ap.add_argument("--n", type=int, default=300, help="calls per block")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--meter", action="store_true", help="an SDK MeterProvider with an in-memory reader")
    ap.add_argument("--bare", action="store_true", help="time the bare SDK too (not for --kind wrapper)")
    args = ap.parse_args()
    import otel_budget

    ref = load_ref(args.ref)
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    mp = MeterProvider(metric_readers=[InMemoryMetricReader()]) if args.meter else None
    configs: list[tuple[str, Any]] = [("ref " + args.ref, ref), ("work tree", otel_budget)]
    if args.bare and args.kind != "wrapper":
        configs.insert(0, ("bare SDK", None))
    samples: dict[str, list[float]] = {name: [] for name, _ in configs}
    for rep in range(args.reps):
        order = configs if rep % 2 == 0 else configs[::-1]
        for name, pkg in order:
            samples[name].append(block(pkg, args.kind, args.n, tp, mp, exporter))
    a, b = samples["ref " + args.ref], samples["work tree"]
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    print(f"kind={args.kind} meter={args.meter} n={args.n} reps={args.reps}")
    for name, values in samples.items():
        print(f"  {name:>12}: median {statistics.median(values):8.1f} us/call  min {min(values):8.1f}")
    print(f"  paired diff (work - ref): median {statistics.median(diffs):+.1f} us/call  "
          f"({statistics.median(diffs) / statistics.median(a) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
