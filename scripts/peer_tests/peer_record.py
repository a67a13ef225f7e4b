"""pytest plugin (`-p peer_record`), loaded in every pass: each test's outcome by node id, as JSON.

`PEER_RECORD=FILE` names the file, written at the end of the session by the controlling process (with
pytest-xdist, workers' reports reach it too). Outcomes: passed, failed, error (setup or teardown), skipped,
xfailed, xpassed; a test with several reports keeps the worst.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_RANK = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 2, "failed": 3, "error": 4}
_outcomes: dict[str, str] = {}


def _outcome(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.skipped:
        return "skipped"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "passed" if report.when == "call" else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = _outcome(report)
    if outcome is None:
        return
    seen = _outcomes.get(report.nodeid)
    if seen is None or _RANK[outcome] > _RANK[seen]:
        _outcomes[report.nodeid] = outcome


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:  # a module that cannot be imported: its tests count as errors
        _outcomes[report.nodeid or "<collection>"] = "error"


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    path = os.environ.get("PEER_RECORD")
    if not path or hasattr(session.config, "workerinput"):
        return
    with open(path, "w", encoding="utf-8") as out:
        json.dump(_outcomes, out, indent=0, sort_keys=True)
