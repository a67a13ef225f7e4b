"""Where finished runs come from: trace files (one JSON document per line) and the Jaeger query API."""

from __future__ import annotations

import os
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from .assemble import RunAssembler
from .progress import LARGE_BYTES, LARGE_COUNT, Progress
from .records import RunRecord
from .spans import BadRecord, spans_from_jaeger, spans_from_json
from .untrusted import loads, printable


@dataclass
class Loaded:
    """The runs read, and how many input lines or traces were bad."""

    runs: list[RunRecord] = field(default_factory=list)
    lines: int = 0
    bad_lines: int = 0
    good_lines: int = 0
    """Inputs that were read (a line or a trace), whether or not they held a run."""


def read_file(path: str, *, progress: bool | None = None, errors: TextIO | None = None) -> Loaded:
    """Read runs from an OTLP/JSON (or Jaeger JSON) lines file; `-` reads stdin.

    Every malformed line is reported on `errors` (stderr) as `path:line: reason`, and the rest still count.
    `progress=None` shows a bar on stderr when the file is large (over 2 MB or 1000 lines).
    """
    errors = errors if errors is not None else sys.stderr
    size = os.path.getsize(path) if path != "-" else 0
    bar = Progress(size, f"reading {printable(os.path.basename(path))}", enabled=bool(progress), stream=errors)
    loaded = Loaded()
    assembler = RunAssembler()
    fh = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    done = 0
    try:
        for number, line in enumerate(fh, 1):
            loaded.lines = number
            done += len(line.encode("utf-8", "replace")) if size else 0
            if progress is None and size and (size > LARGE_BYTES or number > LARGE_COUNT):
                bar.enabled = True
            bar.update(done)
            if not line.strip():
                continue
            try:
                data = loads(line)
            except ValueError as exc:
                _bad(loaded, bar, f"{path}:{number}: not JSON ({exc})")
                continue
            try:
                assembler.add(list(spans_from_json(data)))
                loaded.good_lines += 1
            except (BadRecord, TypeError, ValueError, AttributeError) as exc:
                _bad(loaded, bar, f"{path}:{number}: {exc}")
            except RecursionError:
                _bad(loaded, bar, f"{path}:{number}: nested too deeply to read")
    finally:
        bar.close()
        if fh is not sys.stdin:
            fh.close()
    loaded.runs = assembler.runs()
    return loaded


def _bad(loaded: Loaded, bar: Progress, message: str) -> None:
    loaded.bad_lines += 1
    bar.note(printable(message))  # the reason may quote the line: no control character reaches the terminal


Fetch = Callable[[str], bytes]


def _get(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - a URL the user gave
        data: bytes = resp.read()
    return data


def read_jaeger(
    url: str,
    *,
    service: str | None = None,
    limit: int = 1000,
    lookback: str | None = None,
    progress: bool | None = None,
    errors: TextIO | None = None,
    fetch: Fetch = _get,
) -> Loaded:
    """Read runs through the Jaeger query API: GET {url}/api/traces?service=...&limit=...

    Without `service`, every service from /api/services is read. Bad traces are reported on `errors`.
    """
    errors = errors if errors is not None else sys.stderr
    base = url.rstrip("/")
    services = [service] if service else _services(base, fetch)
    loaded = Loaded()
    assembler = RunAssembler()
    for svc in services:
        query = {"service": svc, "limit": str(limit)}
        if lookback:
            query["lookback"] = lookback
        body = loads(fetch(f"{base}/api/traces?{urllib.parse.urlencode(query)}"))
        traces = body.get("data") or [] if isinstance(body, dict) else []
        bar = Progress(len(traces), f"reading {printable(svc)}", enabled=progress or (progress is None and len(traces) > LARGE_COUNT),
                       stream=errors)
        try:
            for i, tr in enumerate(traces, 1):
                loaded.lines += 1
                bar.update(i)
                try:
                    assembler.add(list(spans_from_jaeger(tr)))
                    loaded.good_lines += 1
                except (BadRecord, TypeError, ValueError, AttributeError, RecursionError) as exc:
                    trace_id = tr.get("traceID", "?") if isinstance(tr, dict) else "?"
                    why = "nested too deeply to read" if isinstance(exc, RecursionError) else exc
                    _bad(loaded, bar, f"{svc}: trace {i} ({trace_id}): {why}")
        finally:
            bar.close()
    loaded.runs = assembler.runs()
    return loaded


def _services(base: str, fetch: Fetch) -> list[str]:
    body = loads(fetch(f"{base}/api/services"))
    names = body.get("data") or [] if isinstance(body, dict) else []
    return [n for n in names if isinstance(n, str) and not n.startswith("jaeger")]
