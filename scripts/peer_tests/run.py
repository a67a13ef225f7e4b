"""`make peer-tests`: the installed SDKs' own test suites, without otel-budget and with it, test by test.

For each suite (openai, openai-agents, anthropic): download the sdist of the version installed in our venv from
PyPI (cached), build a venv with its test dependencies and otel-budget (editable), then run its tests in passes:

- `base`:  as they are;
- `trace`: with `otel_budget.instrument()` active for the whole session (plugin `otel_budget_peer`);
- `run`:   the same, and every test body inside a generous `otel_budget.run` (see `otel_budget_peer.GENEROUS`);
- `money`: the same run with a money cap no test reaches (`otel_budget_peer.MONEY`): every call priced and admitted
           on its input estimate, every chat stream given the `include_usage` that runs add (and hide).

A test that works without us (passed, skipped, xfailed) must have the same outcome with us; tests that fail
without us are reported, not counted. A difference is run again, alone, without and with us, before it counts:
one that does not reproduce is reported as flaky. Exit status 1 when any difference remains.

Options come from the environment (see the Makefile): PEER_SUITES, PEER_PASSES, PEER_JOBS, PEER_CACHE, and
PEER_REUSE (passes whose outcomes recorded by the last run are reused, for re-runs by hand).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from compare import Comparison, compare, counts, load, merge
from suites import SUITES, Suite

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_BIN = Path(sys.executable).parent
MODES = ("base", "trace", "run", "money")
#: Differences above this many are not re-run one by one: they are not flakes.
RECHECK_MAX = 40


def log(text: str) -> None:
    print(f"[peer-tests] {text}", flush=True)


def sh(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload, no-any-return]


# --- set-up: sdist, sources, venv ---------------------------------------------------------------------------


def sdist(suite: Suite, version: str, cache: Path) -> Path:
    """The suite's sources from its PyPI sdist (downloaded once; nothing of it is committed)."""
    stem = f"{suite.name.replace('-', '_')}-{version}"
    source = cache / "src" / stem
    if (source / "pyproject.toml").exists():
        return source
    downloads = cache / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    names = {f"{stem}.tar.gz".lower(), f"{suite.name}-{version}.tar.gz".lower()}

    def cached() -> Path | None:
        return next((p for p in downloads.glob("*.tar.gz") if p.name.lower() in names), None)

    archive = cached()
    if archive is None:
        log(f"downloading the sdist of {suite.name}=={version}")
        sh([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(downloads),
            f"{suite.name}=={version}"])
        archive = cached()
        if archive is None:
            raise SystemExit(f"[peer-tests] pip downloaded no sdist named {sorted(names)} into {downloads}")
    (cache / "src").mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        tar.extractall(cache / "src", filter="data")
    if top != stem:
        shutil.move(str(cache / "src" / top), source)
    return source


def venv(suite: Suite, version: str, cache: Path) -> Path:
    """A venv per suite (their test dependencies conflict with ours): its requirements, the pinned SDKs, and
    otel-budget from this checkout (editable)."""
    pins = [f"{suite.name}=={version}"] + [f"{d}=={importlib.metadata.version(d)}" for d in suite.pins]
    requirements = HERE / suite.requirements
    key = hashlib.sha256("\n".join([requirements.read_text(), *pins, str(REPO)]).encode()).hexdigest()[:16]
    path = cache / "venv" / suite.name
    stamp = path / ".peer-installed"
    if stamp.exists() and stamp.read_text() == key:
        return path / "bin" / "python"
    log(f"building the venv of {suite.name} ({path})")
    uv = VENV_BIN / "uv"
    sh([str(uv), "venv", "-q", "--clear", "--python", sys.executable, str(path)])
    sh([str(uv), "pip", "install", "-q", "--python", str(path / "bin" / "python"), "-r", str(requirements),
        "-e", str(REPO), *pins])
    stamp.write_text(key)
    return path / "bin" / "python"


# --- passes ---------------------------------------------------------------------------------------------------


def pytest_cmd(python: Path, mode: str, jobs: int, extra: list[str]) -> list[str]:
    plugins = ["-p", "peer_select", "-p", "peer_record"]
    if mode != "base":
        plugins += ["-p", "otel_budget_peer"]
    return [str(python), "-m", "pytest", *plugins, "-p", "no:cacheprovider", "-q", "-n", str(jobs),
            "--continue-on-collection-errors", "-o", "console_output_style=classic", *extra]


def env_for(suite: Suite, mode: str, record: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST_"))}
    env.update(suite.env)
    env["PYTHONPATH"] = str(HERE)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # LiteLLM would fetch its price table from the network
    env["OTEL_BUDGET_PEER"] = mode
    env["PEER_RECORD"] = str(record)
    return env


def session(suite: Suite, python: Path, source: Path, mode: str, record: Path, jobs: int, extra: list[str],
            logfile: Path) -> None:
    """One pytest session; its outcomes go to `record`."""
    record.unlink(missing_ok=True)
    with logfile.open("ab") as out:
        proc = subprocess.run(pytest_cmd(python, mode, jobs, extra), cwd=source,
                              env=env_for(suite, mode, record), stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode not in (0, 1, 5) or not record.exists():
        raise SystemExit(f"[peer-tests] {suite.name} {mode}: pytest ended with status {proc.returncode} "
                         f"without recording outcomes; see {logfile}")


def run_pass(suite: Suite, python: Path, source: Path, mode: str, results: Path, jobs: int,
             reuse: bool = False) -> tuple[dict[str, str], float]:
    """All of a suite's tests in one mode (its serial tests apart, without xdist); outcomes and wall time.
    `reuse`: the outcomes recorded by the last run of this pass, when there are (for re-runs by hand)."""
    timing = results / f"{suite.name}-{mode}.seconds"
    if reuse and timing.exists():
        parts = [load(results / f"{suite.name}-{mode}.json"), load(results / f"{suite.name}-{mode}-serial.json")]
        return merge(*parts), float(timing.read_text())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcomes, seconds = _run_pass(suite, python, source, mode, results, jobs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    log(f"{suite.name} {mode}: {cpu:.0f} CPU seconds (pytest and its workers), {seconds:.0f} s wall")
    timing.write_text(f"{seconds:.1f}")
    return outcomes, seconds


def _run_pass(suite: Suite, python: Path, source: Path, mode: str, results: Path, jobs: int) -> tuple[dict[str, str], float]:
    logfile = results / f"{suite.name}-{mode}.log"
    logfile.unlink(missing_ok=True)
    started = time.perf_counter()
    args = [*suite.args, "tests"]
    parts = []
    if suite.serial_marker:
        session(suite, python, source, mode, results / f"{suite.name}-{mode}.json", jobs,
                ["-m", f"not {suite.serial_marker}", *args], logfile)
        parts.append(load(results / f"{suite.name}-{mode}.json"))
        session(suite, python, source, mode, results / f"{suite.name}-{mode}-serial.json", 0,
                ["-m", suite.serial_marker, *args], logfile)
        parts.append(load(results / f"{suite.name}-{mode}-serial.json"))
    else:
        session(suite, python, source, mode, results / f"{suite.name}-{mode}.json", jobs, args, logfile)
        parts.append(load(results / f"{suite.name}-{mode}.json"))
    return merge(*parts), time.perf_counter() - started


def recheck(suite: Suite, python: Path, source: Path, mode: str, found: Comparison, results: Path) -> dict[str, str]:
    """Run each difference again, alone, without and with us; those that do not reproduce are flaky."""
    ids = sorted(found.differences)
    if not ids or len(ids) > RECHECK_MAX:
        return {}
    logfile = results / f"{suite.name}-{mode}-recheck.log"
    again: dict[str, dict[str, str]] = {}
    for m in ("base", mode):
        record = results / f"{suite.name}-{mode}-recheck-{m}.json"
        session(suite, python, source, m, record, 0, [*suite.args, *ids], logfile)
        again[m] = load(record)
    flaky = {}
    for test_id in ids:
        before, after = found.differences[test_id]
        if again["base"].get(test_id) != before or again[mode].get(test_id) != after:
            flaky[test_id] = f"{before}/{after}, then {again['base'].get(test_id)}/{again[mode].get(test_id)}"
    for test_id in flaky:
        del found.differences[test_id]
    return flaky


# --- report -----------------------------------------------------------------------------------------------------


def describe(outcomes: dict[str, str]) -> str:
    c = counts(outcomes)
    return ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed") if c[k])


def main() -> int:
    cache = Path(os.environ.get("PEER_CACHE") or REPO / ".cache" / "peer-tests").resolve()
    names = [n for n in os.environ.get("PEER_SUITES", ",".join(SUITES)).split(",") if n]
    modes = [m for m in os.environ.get("PEER_PASSES", ",".join(MODES)).split(",") if m]
    jobs = int(os.environ.get("PEER_JOBS", "2"))
    reuse = [m for m in os.environ.get("PEER_REUSE", "").split(",") if m]
    if "base" not in modes:
        modes.insert(0, "base")
    results = cache / "results"
    results.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict[str, object]] = {}
    failed = False
    for name in names:
        suite = SUITES[name]
        try:
            version = importlib.metadata.version(suite.name)
        except importlib.metadata.PackageNotFoundError:
            log(f"{name}: not installed here, skipped")
            continue
        source = sdist(suite, version, cache)
        if not (source / "tests").is_dir():
            log(f"{name} {version}: its sdist ships no tests, skipped")
            continue
        python = venv(suite, version, cache)
        outcomes: dict[str, dict[str, str]] = {}
        seconds: dict[str, float] = {}
        loadavg: dict[str, float] = {}
        for mode in modes:
            log(f"{name} {version}: pass '{mode}' (-n {jobs})")
            outcomes[mode], seconds[mode] = run_pass(suite, python, source, mode, results, jobs, mode in reuse)
            loadavg[mode] = os.getloadavg()[2]  # the machine's load over the last 15 minutes: the conditions
            log(f"{name} {mode}: {describe(outcomes[mode])} in {seconds[mode]:.0f} s (load average {loadavg[mode]:.1f})")
        entry: dict[str, object] = {"version": version, "seconds": seconds, "load_average_15min": loadavg,
                                    "counts": {m: dict(counts(o)) for m, o in outcomes.items()}}
        base = outcomes["base"]
        for mode in modes[1:]:
            contract = [(prefix, reason) for prefix, reason, passes in suite.by_contract if mode in passes]
            found = compare(base, outcomes[mode], tuple(prefix for prefix, _ in contract))
            flaky = recheck(suite, python, source, mode, found, results)
            ratio = seconds[mode] / seconds["base"] if seconds["base"] else float("nan")
            log(f"{name} {mode}: {len(found.differences)} differences from the run without otel-budget "
                f"(wall time x{ratio:.2f}); {len(found.broken_without_us)} tests fail without us (not counted)")
            for test_id, (before, after) in sorted(found.differences.items())[:50]:
                log(f"  DIFFERENT {test_id}: {before} without otel-budget, {after} with it")
            for test_id, text in sorted(flaky.items()):
                log(f"  flaky (not counted) {test_id}: {text}")
            for prefix, reason in contract:
                n = sum(1 for t in found.by_contract if t.startswith(prefix))
                if n:
                    log(f"  by contract (not counted): {n} tests in {prefix.rstrip(':')}: {reason}")
            entry[mode] = {"differences": found.differences, "flaky": flaky, "ratio": ratio,
                           "by_contract": found.by_contract,
                           "broken_without_us": len(found.broken_without_us), "only_with_us": found.only_with_us}
            failed = failed or bool(found.differences)
        summary[name] = entry
    (results / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    log(f"summary: {results / 'summary.json'}")
    if not summary:
        log("no suite ran")
        return 1
    log("FAILED: otel-budget changes the outcome of some tests" if failed else "0 differences in every suite")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
