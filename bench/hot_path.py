"""A hot-path cut, before and after: otel-budget's work tree against the package at another commit, in one process.

The other commit's package is extracted (`git archive`) and imported as `otel_budget_ref` (the package imports
itself relatively, so it runs under the other name); `--ref` may also name a directory holding such a copy. Each
repetition times the configurations in turn, each in its own slot: instrument, open a budgeted run with every limit
on (as `overhead.py` runs it), warm up, time a batch, close, uninstrument. A slot's time is the fastest of
`--batches` batches (process CPU time), so a burst of a shared machine's load rarely reaches the figures.

Kinds (`--kinds`): `wrapper` times the wrapper alone (the SDK's request replaced by a function returning a parsed
completion: span, admission, pricing, settlement included), `plain` and `stream` the real openai SDK through the
in-process transport of `workload.py` (`usage`: streams whose caller asks for their usage itself). `--bare` adds the bare SDK before and after the configurations of each
repetition, for the overheads `overhead.py` reports (paired and min-to-min). `--meter` adds an SDK MeterProvider
(in-memory reader). `--icount` counts instructions instead of timing them (valgrind's callgrind, the same calls N
and 2N times in fresh processes: the difference over N), which a loaded machine does not disturb; there the ref runs
under the package's own name, each copy first on its processes' path (the same code counted 0.1% apart that way,
1% apart as `otel_budget_ref`).

`--peer` adds OTel contrib GenAI (openai-v2); with kind `wrapper`, its wrapper of `Completions.create` alone (the SDK
replaced by a function, `peer_wrapper_call`), so the two wrappers compare without the SDK around them. `--branches`
counts, beside the instructions, the branches cachegrind's simulated predictor misses (conditional and indirect: the
interpreter dispatches every bytecode through an indirect jump).

Prints a table; writes nothing. How the figures in results.md were made:
- "Second pass" (hot-span): `--kinds wrapper --calls 300 --reps 15` (alternated blocks, one batch each);
- "The openai adapter" (hot-openai): `--kinds plain,stream --bare --shuffle --calls 30 --streams 8 --batches 5
  --reps 30`.
Run: `.venv/bin/python bench/hot_path.py --ref main [--kinds wrapper,plain,stream] [--bare] [--icount]`.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
WORK, REF, BARE, PEER = "work tree", "ref", "bare SDK", "OTel contrib GenAI (openai-v2)"


def load_ref(ref: str) -> Any:
    """The package as it is at `ref` (a commit, or a directory holding a copy), importable as `otel_budget_ref`."""
    given = Path(ref)
    if given.is_dir():
        source = given / "otel_budget_ref" if (given / "otel_budget_ref").is_dir() else given / "otel_budget"
        if not source.is_dir():
            raise SystemExit(f"{ref}: no otel_budget or otel_budget_ref package in it")
    else:
        source = None
    where = Path(tempfile.mkdtemp(prefix="otel-budget-ref-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    if source is not None:
        shutil.copytree(source, where / "otel_budget_ref")
    else:
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


def peer_wrapper_call() -> Callable[[Any], None]:
    """One call through the peer's wrapper of `Completions.create` (OTel contrib openai-v2, instrumented by the
    caller first) with the SDK replaced by a function returning a parsed completion: the peer's own work alone, as
    `wrapper_call` is ours."""
    from openai.resources.chat.completions import Completions
    from openai.types.chat import ChatCompletion

    result = ChatCompletion.model_validate_json(_COMPLETION)
    wrapper = Completions.create._self_wrapper  # type: ignore[attr-defined]  # wrapt: the peer's function

    def send(*args: Any, **kwargs: Any) -> Any:
        return result

    def one(client: Any) -> None:
        wrapper(send, client.chat.completions, (), {"model": MODEL, "messages": MESSAGES})

    return one


class Slot:
    """One configuration: the package it instruments with (None: the bare SDK), its exporter and client."""

    def __init__(self, name: str, pkg: Any | None, meter: bool) -> None:
        self.name, self.pkg = name, pkg
        self.exporter = InMemorySpanExporter()
        self.tp = TracerProvider()
        self.tp.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.mp = MeterProvider(metric_readers=[InMemoryMetricReader()]) if meter else None
        self.client = make_client()
        self.calls: dict[str, Callable[[Any], None]] = {}

    def fn(self, kind: str) -> Callable[[Any], None]:
        if kind not in self.calls:
            if kind == "wrapper" and self.name == PEER:
                self.calls[kind] = peer_wrapper_call()  # (the peer is instrumented: its wrapper is read now)
            else:
                self.calls[kind] = wrapper_call(self.pkg) if kind == "wrapper" and self.pkg else CALLS[
                    "plain" if kind == "wrapper" else kind]
        return self.calls[kind]

    def time(self, kind: str, n: int, batches: int) -> float:
        """us per call: the fastest of `batches` batches of n calls, inside a budgeted run."""
        pkg = self.pkg
        if pkg is None and self.name == PEER:  # the peer, instrumented for the slot (its wrapper read anew)
            from peers import PEERS

            undo = PEERS[0].setup(self.tp)
            try:
                fn = peer_wrapper_call() if kind == "wrapper" else CALLS[kind]
                timed(fn, self.client, 10)
                return min(timed(fn, self.client, n) for _ in range(batches))
            finally:
                undo()
                self.exporter.clear()
        fn = self.fn(kind)
        if pkg is None:
            timed(fn, self.client, 5)
            return min(timed(fn, self.client, n) for _ in range(batches))
        pkg.instrument(tracer_provider=self.tp, meter_provider=self.mp)
        try:
            with pkg.run("bench-hot", budget=budget(pkg)):
                timed(fn, self.client, 10)
                self.exporter.clear()
                us = min(timed(fn, self.client, n) for _ in range(batches))
                if not self.exporter.get_finished_spans():
                    raise SystemExit(f"{self.name}: no spans were recorded")
        finally:
            pkg.uninstrument()
            self.exporter.clear()
        return us


def measure(args: argparse.Namespace, ref: Any) -> dict[tuple[str, str], list[float]]:
    """Samples per (configuration, kind); the bare SDK (with --bare) twice per repetition."""
    import otel_budget

    slots = [Slot(f"{REF} {args.ref}", ref, args.meter), Slot(WORK, otel_budget, args.meter)]
    if args.peer:
        slots.append(Slot(PEER, None, args.meter))
    bare = Slot(BARE, None, False) if args.bare else None
    rng = random.Random(args.seed)
    n = {"wrapper": args.calls, "plain": args.calls, "stream": args.streams, "usage": args.streams}
    samples: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps):
        for kind in args.kinds:
            order = rng.sample(slots, len(slots)) if args.shuffle else slots if rep % 2 == 0 else slots[::-1]
            row = [bare, *order, bare] if bare is not None and kind != "wrapper" else order
            for slot in row:
                samples.setdefault((slot.name, kind), []).append(slot.time(kind, n[kind], args.batches))  # type: ignore[union-attr]
        print(f"  repetition {rep + 1}/{args.reps}", file=sys.stderr)
    return samples


def report(samples: dict[tuple[str, str], list[float]], args: argparse.Namespace) -> None:
    ref_name = f"{REF} {args.ref}"
    print(f"reps={args.reps} calls={args.calls} streams={args.streams} batches={args.batches} meter={args.meter} "
          f"load {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; us of process CPU per call")
    print("| kind | configuration | median | min | paired overhead | min-to-min overhead |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in args.kinds:
        bare = samples.get((BARE, kind))
        for name in ([BARE] if bare else []) + [ref_name, WORK] + ([PEER] if args.peer else []):
            values = samples[(name, kind)]
            paired = m2m = ""
            if bare and name != BARE:
                paired = f"{statistics.median(v - (bare[2 * i] + bare[2 * i + 1]) / 2 for i, v in enumerate(values)):+.1f}"
                m2m = f"{min(values) - min(bare):+.1f}"
            print(f"| {kind} | {name} | {statistics.median(values):.1f} | {min(values):.1f} | {paired} | {m2m} |")
    for kind in args.kinds:
        a, b = samples[(ref_name, kind)], samples[(WORK, kind)]
        diffs = [y - x for x, y in zip(a, b, strict=True)]
        print(f"{kind}: work tree - ref, median of paired differences {statistics.median(diffs):+.1f} us/call "
              f"({statistics.median(diffs) / statistics.median(a) * 100:+.1f}%)")
        if args.peer and kind == "wrapper":  # the wrappers alone: no bare SDK to subtract
            p = samples[(PEER, kind)]
            print(f"{kind}: work tree / best peer, min {min(b) / min(p):.3f}, median of paired ratios "
                  f"{statistics.median(y / x for x, y in zip(p, b, strict=True)):.3f}")


# --- instruction counts ------------------------------------------------------------------------------------


def _one(pkg_name: str, kind: str, n: int, ref: str) -> None:
    """(Child of --icount) n calls of `kind` with the package named, after setup and warm-up. The objects made
    before the counted calls are frozen out of the collector's reach (`gc.freeze`) and the collector is off while
    they run: a collection landed in one count and not the other (the same stream code counted three times gave
    22,134k, 22,106k and 22,056k instructions per call; with the collector off 22,091.5k, 22,092.3k and 22,092.8k).
    What it leaves out is small: a call leaves about 5 objects behind (its span, kept by the in-memory exporter),
    for us and the peer alike, so a young-generation collection comes every 30-40 calls."""
    # The ref and the work tree are both imported as `otel_budget` (each process's path says which copy): a copy
    # imported under another name counted about 1% apart from the same code, as much as a cut being judged.
    pkg = importlib.import_module("otel_budget") if pkg_name in (REF, WORK) else None
    if pkg_name == REF and Path(pkg.__file__).resolve().parent.parent != Path(ref).resolve():  # type: ignore[union-attr]
        raise SystemExit(f"the ref's process imported {pkg.__file__}, not the copy in {ref}")  # type: ignore[union-attr]
    slot = Slot(pkg_name, pkg, False)
    if pkg is None:
        if pkg_name == PEER:
            from peers import PEERS

            PEERS[0].setup(slot.tp)
        _counted(slot.fn(kind), slot.client, n)
        return
    fn = slot.fn(kind)
    pkg.instrument(tracer_provider=slot.tp)
    with pkg.run("bench-hot", budget=budget(pkg)):
        _counted(fn, slot.client, n)


def _counted(fn: Callable[[Any], None], client: Any, n: int) -> None:
    for _ in range(10):
        fn(client)
    gc.collect()
    gc.freeze()
    gc.disable()
    for _ in range(n):
        fn(client)


def _frozen_work_tree() -> dict[str, str]:
    """The environment of the counted processes: the work tree's package as it is now, copied, comes first on the
    path, so an edit made while they run does not reach some of them."""
    where = Path(tempfile.mkdtemp(prefix="otel-budget-work-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    shutil.copytree(ROOT / "otel_budget", where / "otel_budget", ignore=shutil.ignore_patterns("__pycache__"))
    # One hash seed for every counted process: string hashing decides dict and set layouts, and with a random seed
    # the same calls counted in two processes differed by up to 12% (streams, 100 calls).
    return {**os.environ, "PYTHONHASHSEED": "0",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))}


def valgrind_events(argv: list[str], env: dict[str, str], misses: bool = False,
                    branches: bool = False) -> dict[str, int]:
    """Events of one counted Python process (`python argv...`): {"Ir": instructions} (callgrind), with `misses` also
    {"I1mr", "D1mr"}: the first-level cache misses of cachegrind's simulated caches (instruction and data reads), with
    `branches` {"Bcm", "Bim"}: the conditional and indirect branches its simulated predictor missed."""
    tool = "cachegrind" if misses or branches else "callgrind"
    sims = ([f"--cache-sim={'yes' if misses else 'no'}", f"--branch-sim={'yes' if branches else 'no'}"]
            if tool == "cachegrind" else [])
    with tempfile.TemporaryDirectory() as where:
        out_file = Path(where) / "out"
        done = subprocess.run(
            ["valgrind", f"--tool={tool}", *sims, f"--{tool}-out-file={out_file}", sys.executable, *argv],
            capture_output=True, text=True, env=env, check=False,
        )
        if done.returncode != 0 or not out_file.exists():
            raise SystemExit(f"valgrind failed:\n{done.stderr[-2000:]}")
        events: list[str] = []
        for line in out_file.read_text().splitlines():
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                got = dict(zip(events, map(int, line.split()[1:]), strict=False))
                return {k: got[k] for k in ("Ir", "I1mr", "D1mr", "Bcm", "Bim") if k in got}
    raise SystemExit("valgrind wrote no totals")


def _instructions(pkg_name: str, kind: str, n: int, ref: str, env: dict[str, str], misses: bool,
                  branches: bool) -> dict[str, int]:
    return valgrind_events([__file__, "--one", pkg_name, kind, str(n), "--ref", ref], env, misses, branches)


def icount(args: argparse.Namespace) -> None:
    """Instructions per call: (the count for 2N calls - the count for N calls) / N, each in a fresh process."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--icount needs valgrind (apt-get install valgrind)")
    n = args.icount_calls
    seeds = args.hash_seeds
    env = _frozen_work_tree()
    given = args.ref
    # The ref's package (a commit's, or a directory's copy), extracted once as `otel_budget`, first on its processes'
    # path in place of the work tree's.
    archive = Path(tempfile.mkdtemp(prefix="otel-budget-ref-"))
    atexit.register(shutil.rmtree, archive, ignore_errors=True)
    load_ref(args.ref)
    shutil.copytree(Path(sys.modules["otel_budget_ref"].__file__).parent, archive / "otel_budget",  # type: ignore[arg-type]
                    ignore=shutil.ignore_patterns("__pycache__"))
    args.ref = str(archive)
    ref_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(archive), os.environ.get("PYTHONPATH")]))}
    names = ([BARE] if args.bare else []) + ([PEER] if args.peer else []) + [REF, WORK]
    tool = ("cachegrind, simulated caches" if args.misses else "cachegrind, simulated branch prediction"
            if args.branches else "callgrind")
    print(f"instructions per call ({tool}, {n} and {2 * n} calls after 10 warm-up calls, every limit on)")
    if len(seeds) > 1:
        print(f"(each count the mean over hash seeds {', '.join(map(str, seeds))}: one process per seed)")
    if args.branches:
        print("| kind | configuration | instructions/call | overhead over bare | mispredicted branches/call "
              "(conditional + indirect) | over bare |")
        print("|---|---|---:|---:|---:|---:|")
    elif args.misses:
        print("| kind | configuration | instructions/call | overhead over bare | L1 misses/call | misses over bare |")
        print("|---|---|---:|---:|---:|---:|")
    else:
        print("| kind | configuration | instructions/call | overhead over bare |")
        print("|---|---|---:|---:|")
    jobs = [(name, kind, calls, seed) for kind in args.kinds for name in names for calls in (n, 2 * n)
            for seed in seeds if not (name == BARE and kind == "wrapper")]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # each job is a process: one per core
        events = dict(zip(jobs, pool.map(
            lambda job: _instructions(job[0], job[1], job[2], args.ref,
                                      {**(ref_env if job[0] == REF else env), "PYTHONHASHSEED": str(job[3])},
                                      args.misses, args.branches),
            jobs), strict=True))
    for kind in args.kinds:
        # per configuration and seed: events per call; then the mean over the seeds
        by_seed = {(name, seed): {k: (events[(name, kind, 2 * n, seed)][k] - events[(name, kind, n, seed)][k]) / n
                                  for k in events[(name, kind, n, seed)]}
                   for name in names for seed in seeds if (name, kind, n, seed) in events}
        per = {name: {k: sum(by_seed[(name, seed)][k] for seed in seeds) / len(seeds) for k in by_seed[(name, seeds[0])]}
               for name in names if (name, seeds[0]) in by_seed}
        if len(seeds) > 1 and args.branches and {BARE, PEER} <= per.keys():
            missed = {key: e.get("Bcm", 0) + e.get("Bim", 0) for key, e in by_seed.items()}
            ratios = [(missed[(WORK, seed)] - missed[(BARE, seed)]) / (missed[(PEER, seed)] - missed[(BARE, seed)])
                      for seed in seeds]
            print(f"{kind}: mispredicted branches over the bare SDK, work tree / best peer by hash seed: "
                  + ", ".join(f"{seed}: {r:.2f}" for seed, r in zip(seeds, ratios, strict=True)))
        got = {name: e["Ir"] for name, e in per.items()}
        missed = {name: e.get("I1mr", 0) + e.get("D1mr", 0) for name, e in per.items()}
        mispredicted = {name: e.get("Bcm", 0) + e.get("Bim", 0) for name, e in per.items()}
        for name, count in got.items():
            over = f"{count - got[BARE]:+,.0f}" if BARE in got and name != BARE else ""
            label = f"{REF} {given}" if name == REF else name
            if args.branches:
                more = f"{mispredicted[name] - mispredicted[BARE]:+,.0f}" if BARE in got and name != BARE else ""
                e = per[name]
                print(f"| {kind} | {label} | {count:,.0f} | {over} | {mispredicted[name]:,.0f} ({e.get('Bcm', 0):,.0f} + "
                      f"{e.get('Bim', 0):,.0f}) | {more} |")
            elif args.misses:
                more = f"{missed[name] - missed[BARE]:+,.0f}" if BARE in got and name != BARE else ""
                print(f"| {kind} | {label} | {count:,.0f} | {over} | {missed[name]:,.0f} | {more} |")
            else:
                print(f"| {kind} | {label} | {count:,.0f} | {over} |")
        print(f"{kind}: work tree / ref {got[WORK] / got[REF]:.3f} ({(got[WORK] / got[REF] - 1) * 100:+.1f}%)")
        if BARE in got:
            over = {name: got[name] - got[BARE] for name in got if name != BARE}
            print(f"{kind}: overhead, work tree / ref {over[WORK] / over[REF]:.3f}"
                  + (f"; work tree / best peer {over[WORK] / over[PEER]:.3f}" if PEER in over else ""))
        elif kind == "wrapper" and PEER in got:  # the wrappers alone: no bare SDK in either
            print(f"{kind}: work tree / best peer {got[WORK] / got[PEER]:.3f}"
                  + (f"; mispredicted branches {mispredicted[WORK] / mispredicted[PEER]:.3f}" if args.branches else ""))


def bytecode_counts(args: argparse.Namespace) -> None:
    """Bytecodes per call (see bytecodes.py), each configuration in turn in this process, and with `--top`, the
    functions where the work tree's overhead over the bare SDK goes."""
    import bytecodes
    from peers import PEERS

    import otel_budget

    ref = load_ref(args.ref)
    n = args.icount_calls
    configs = ([BARE] if args.bare else []) + ([PEER] if args.peer else []) + [REF, WORK]
    print(f"bytecodes per call ({n} calls after 10 warm-up calls, every limit on)")
    print("| kind | configuration | bytecodes/call | overhead over bare |")
    print("|---|---|---:|---:|")
    for kind in args.kinds:
        got: dict[str, Any] = {}
        got_fp: dict[str, Any] = {}
        for name in configs:
            if name == BARE and kind == "wrapper":
                continue
            slot = Slot(name, {REF: ref, WORK: otel_budget}.get(name), False)
            if slot.pkg is None:
                undo = PEERS[0].setup(slot.tp) if name == PEER else (lambda: None)
                try:
                    fn = slot.fn(kind)
                    got[name] = bytecodes.count(fn, slot.client, n)
                    if args.footprint:
                        got_fp[name] = bytecodes.footprint(fn, slot.client)
                finally:
                    undo()
                continue
            fn = slot.fn(kind)
            slot.pkg.instrument(tracer_provider=slot.tp)
            try:
                with slot.pkg.run("bench-hot", budget=budget(slot.pkg)):
                    got[name] = bytecodes.count(fn, slot.client, n)
                    if args.footprint:
                        got_fp[name] = bytecodes.footprint(fn, slot.client)
            finally:
                slot.pkg.uninstrument()
        total = {name: sum(c.values()) / n for name, c in got.items()}
        for name, value in total.items():
            extra = f"{value - total[BARE]:+,.0f}" if BARE in total and name != BARE else ""
            print(f"| {kind} | {f'{REF} {args.ref}' if name == REF else name} | {value:,.0f} | {extra} |")
        print(f"{kind}: work tree - ref {total[WORK] - total[REF]:+,.0f} bytecodes/call")
        if BARE in total and PEER in total:
            print(f"{kind}: overhead, work tree / best peer "
                  f"{(total[WORK] - total[BARE]) / (total[PEER] - total[BARE]):.3f}")
        if args.footprint:
            _footprints(got_fp, kind, args.top)
        if args.top and BARE in got:
            base = got[BARE]
            added = {key: (value - base.get(key, 0)) / n for key, value in got[WORK].items()}
            parts: dict[str, float] = {}
            for key, value in added.items():
                parts[bytecodes.group(key)] = parts.get(bytecodes.group(key), 0.0) + value
            print(f"{kind}: the work tree's overhead by part: "
                  + ", ".join(f"{part} {value:+,.0f}" for part, value in sorted(parts.items(), key=lambda x: -x[1])
                              if abs(value) >= 1))
            for key, value in sorted(added.items(), key=lambda x: -x[1])[: args.top]:
                print(f"  {value:+8,.0f}  {key}")


def _footprints(got: dict[str, Any], kind: str, top: int) -> None:
    """The code each configuration's call runs beyond the bare SDK's (see bytecodes.footprint)."""
    import bytecodes

    base_lines, base_codes = got.get(BARE, (set(), set()))
    for name, (lines, codes) in got.items():
        if name == BARE:
            continue
        extra = lines - base_lines
        print(f"{kind}: {name}: {len(extra):,} lines of bytecode ({len(extra) * bytecodes.LINE / 1024:.1f} kB) in "
              f"{len(codes - base_codes)} code objects" + (" beyond the bare SDK's" if BARE in got else ""))
        if top and name == WORK:
            by_file: dict[str, int] = {}
            for code, _ in extra:
                where = bytecodes._where(code).split(":", 1)[0]
                by_file[where] = by_file.get(where, 0) + 1
            print(f"{kind}: the work tree's lines by file: "
                  + ", ".join(f"{f} {v}" for f, v in sorted(by_file.items(), key=lambda x: -x[1])[:top]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ref", default="HEAD", help="the commit (or a directory with a copy) to compare with")
    ap.add_argument("--kinds", default="wrapper", help="comma-separated: wrapper, plain, stream, usage")
    ap.add_argument("--calls", type=int, default=300, help="wrapper or non-streamed calls per batch")
    ap.add_argument("--streams", type=int, default=40, help="streamed calls per batch")
    ap.add_argument("--batches", type=int, default=1, help="batches per slot; the fastest counts")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--shuffle", action="store_true", help="shuffle the order in each repetition (else alternate)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--meter", action="store_true", help="an SDK MeterProvider with an in-memory reader")
    ap.add_argument("--bare", action="store_true", help="the bare SDK before and after each repetition")
    ap.add_argument("--icount", action="store_true", help="count instructions (valgrind) instead of timing")
    ap.add_argument("--branches", action="store_true",
                    help="--icount under cachegrind: mispredicted branches (simulated) beside the instructions")
    ap.add_argument("--misses", action="store_true",
                    help="--icount under cachegrind: first-level cache misses (simulated) beside the instructions")
    ap.add_argument("--icount-calls", type=int, default=100, help="N of --icount and --bytecodes")
    ap.add_argument("--hash-seeds", default="0", help="--icount: comma-separated PYTHONHASHSEED values, one counted "
                    "process per seed and configuration, the counts averaged (string hashing sets dict layouts: the "
                    "peer's mispredicted branches moved 15%% between seeds)")
    ap.add_argument("--bytecodes", action="store_true", help="count bytecodes executed (sys.settrace) per call")
    ap.add_argument("--top", type=int, default=0, help="--bytecodes with --bare: the work tree's top functions")
    ap.add_argument("--footprint", action="store_true",
                    help="--bytecodes: also the lines of bytecode a call runs beyond the bare SDK's (bytecodes.footprint)")
    ap.add_argument("--peer", action="store_true", help="OTel contrib GenAI (openai-v2) too (with kind wrapper: its "
                    "wrapper alone, see peer_wrapper_call)")
    ap.add_argument("--one", nargs=3, metavar=("CONFIG", "KIND", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _one(args.one[0], args.one[1], int(args.one[2]), args.ref)
        return
    args.kinds = args.kinds.split(",")
    args.hash_seeds = [int(seed) for seed in args.hash_seeds.split(",")]
    if unknown := set(args.kinds) - {"wrapper", "plain", "stream", "usage"}:
        raise SystemExit(f"unknown kinds: {', '.join(sorted(unknown))}")
    if args.icount:
        icount(args)
        return
    if args.bytecodes:
        bytecode_counts(args)
        return
    report(measure(args, load_ref(args.ref)), args)


if __name__ == "__main__":
    main()
