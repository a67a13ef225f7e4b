"""Hostile names in a trace file (issue 21, item 8): no control character reaches the terminal from any command,
names are plain text in the page's plots (not TeX math), the plots group names beyond a handful, and HTML in a
name never runs in a real headless Chromium."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from otel_budget.telemetry import semconv as sc

from ._hostile import UNSAFE, call_attributes, forge, otel_budget, strict_json, write_trees
from ._spans import run_attributes, write_runs
from .test_html_report import CHROMIUM_FLAGS, _chromium

#: A name that clears the screen, sets the window title, turns text red through an 8-bit CSI, rings the bell,
#: returns the carriage, starts a fake line and reverses the text that follows.
EVIL = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m\rFAKE\nPASS: \u202eelif"
EVIL_REASON = "steps\x1b[31m\x00"
EVIL_ACTION = "open\x1b[8m:abc\x7f"


def _trees() -> list:
    runs = []
    for i, reason in enumerate(["done", "done", EVIL_REASON]):
        attrs = run_attributes(EVIL, reason, 2, 1, 1.0, 900, 0.01 * (i + 1))
        attrs[sc.LIMIT_PREFIX + "steps"] = 2  # a cap that cuts healthy runs: compare warns, naming the run
        attrs[sc.WRAP_UP] = "Stopped at \x1b[2Jthe cap\x9b2J."
        second = ["read:1"] if reason == "done" else [EVIL_ACTION]
        runs.append((attrs, [call_attributes(1, 400, 0.005, ["open:abc"]), call_attributes(2, 500, 0.005, second)]))
    return runs


@pytest.fixture(scope="module")
def evil_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("evil") / "evil.jsonl"
    lines = write_trees(path, _trees())
    broken = forge(lines[0], "x", {})  # a line whose span id carries an escape sequence and an attribute no key
    broken = broken.replace('{"key": "x", "value": {}}', '{"value": {}}').replace('"spanId": "', '"spanId": "\\u001b[2J')
    path.write_text("\n".join([*lines, broken]) + "\n")
    return path


@pytest.mark.parametrize("command", [["recommend"], ["report"], ["diff", "--run-name", EVIL], ["evals"],
                                     ["compare"], ["recommend", "--json"], ["evals", "-o", "cases.jsonl"]])
def test_no_control_character_reaches_the_terminal(evil_file, tmp_path, command):
    args = [*command, str(evil_file), str(evil_file)] if command == ["compare"] else [*command, str(evil_file)]
    if "-o" in command:
        args[args.index("cases.jsonl")] = str(tmp_path / "cases.jsonl")
    done = otel_budget(*args)
    assert done.returncode in (0, 1), done.stderr  # compare: 1 line of each input could not be read
    assert "Traceback" not in done.stderr
    assert UNSAFE.search(done.stdout) is None, repr(done.stdout)
    assert UNSAFE.search(done.stderr) is None, repr(done.stderr)
    assert "attribute without a key" in done.stderr and "\\x1b[2J" in done.stderr  # reported, escaped
    if command in (["report"], ["compare"]):
        assert "steps\\x1b[31m\\x00" in done.stdout  # the stop reason
    if command in (["recommend"], ["diff", "--run-name", EVIL], ["compare"]):
        # Still shown, escaped: the user sees what the trace holds, on one line.
        assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\rFAKE\\nPASS: \\u202eelif" in done.stdout
        assert "\nPASS: " not in done.stdout.replace("\nPASS: completion rate held", "")
    if command[0] == "diff":
        assert "open\\x1b[8m:abc\\x7f" in done.stdout and "steps\\x1b[31m\\x00" in done.stdout
    if command[0] == "evals":
        out = (tmp_path / "cases.jsonl").read_text() if "-o" in command else done.stdout
        (case,) = [strict_json(line) for line in out.splitlines()]
        assert case["wrap_up"] == "Stopped at \x1b[2Jthe cap\x9b2J." and case["run_name"] == EVIL  # JSON: exact
        assert UNSAFE.search(out) is None


def test_a_dollar_in_a_name_is_plain_text_and_tex_is_never_run(tmp_path):
    """Before: `$\\undefined$` made mathtext raise and no page was written; with `text.usetex: True` in the
    user's matplotlibrc the names went to TeX (here: no latex installed, so no page either)."""
    path = tmp_path / "runs.jsonl"
    names = ["cost $\\undefinedmacro{x}$", "a $x^{2 $ b", "$5 and $6", "\\input{/etc/passwd}"]
    write_runs(path, [run_attributes(name, reason, 3, 1, 1.0, 900, 0.01)
                      for name in names for reason in ("done", "$\\alpha$")])
    for rc in ("", "text.usetex: True\n"):
        config = tmp_path / f"mpl{len(rc)}"
        config.mkdir()
        (config / "matplotlibrc").write_text(rc)
        page = tmp_path / f"report{len(rc)}.html"
        done = otel_budget("report", str(path), "--html", str(page), env=_env(MPLCONFIGDIR=str(config)))
        assert done.returncode == 0, done.stderr
        assert page.read_text().count('src="data:image/png;base64,') == 3


def test_the_plots_group_run_names_beyond_a_handful(tmp_path):
    """2,000 run names (and 2,000 stop reasons): the costliest MAX_NAMES names get a series each, the rest one
    "other" series; the cost plot has at most MAX_REASONS + 1 bars. Before, every name was a series (77 s for
    2,000 names against 0.5 s for the text report; see bench/report_names.py)."""
    import matplotlib.pyplot as plt

    from otel_budget.analysis.html_report import MAX_BINS, MAX_NAMES, MAX_REASONS, figures
    from otel_budget.analysis.records import RunRecord, TurnRecord

    runs = [RunRecord(f"task-{i:04d}", "done" if i % 2 else f"reason-{i}", trace_id=f"{i:032x}", span_id=f"{i:016x}",
                      used={"steps": i % 90, "usd": 0.001 * i},
                      turns=[TurnRecord(turn=t, input_tokens=100 * t) for t in range(1, 4)]) for i in range(2000)]
    plots = dict(figures(runs))
    try:
        growth, steps, cost = (plots[t].axes[0] for t in ("Context growth", "Steps", "Cost"))
        labels = [t.get_text() for t in steps.get_legend().get_texts()]
        assert labels == [f"task-{i:04d}" for i in range(1999, 1999 - MAX_NAMES, -1)] + [
            f"other ({2000 - MAX_NAMES} names, {2000 - MAX_NAMES} runs)"]
        assert len(steps.containers) == MAX_NAMES + 1
        assert len(steps.patches) <= (MAX_NAMES + 1) * MAX_BINS
        assert len(cost.patches) == MAX_REASONS + 1
        assert cost.get_xticklabels()[-1].get_text() == f"other ({1000 + 1 - MAX_REASONS})"
        assert len(growth.get_legend().get_texts()) <= MAX_REASONS + 1
    finally:
        for fig in plots.values():
            plt.close(fig)
    # The healthy side: a handful of names are all drawn, with no "other".
    plots = dict(figures(runs[:4]))
    try:
        labels = [t.get_text() for t in plots["Steps"].axes[0].get_legend().get_texts()]
        assert labels == ["task-0003", "task-0002", "task-0001", "task-0000"]
    finally:
        for fig in plots.values():
            plt.close(fig)


def test_the_page_for_2000_run_names_is_written(tmp_path):
    path = tmp_path / "runs.jsonl"
    write_runs(path, (run_attributes(f"task-{i:04d}", ("done", "steps", "cost")[i % 3], 3 + i % 17, 1, 1.0, 900,
                                     0.001 * i) for i in range(2000)), batch=200)
    page = tmp_path / "report.html"
    done = otel_budget("report", str(path), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert "2000 finished runs" in page.read_text() and page.read_text().count("data:image/png;base64,") == 3


def test_html_in_names_and_reasons_never_runs_in_chromium(tmp_path):
    """HTML payloads in a run name or a stop reason stay text in the page (the DOM after a real headless Chromium
    loaded it holds no element of theirs, and the title is untouched)."""
    path = tmp_path / "runs.jsonl"
    payloads = ["<script>document.title='PWNED'</script>", "<img src=x onerror=\"document.title='PWNED'\">",
                "\"><svg onload=\"document.title='PWNED'\">"]
    write_runs(path, [run_attributes(p, p, 3, 1, 1.0, 900, 0.01) for p in payloads])
    page = tmp_path / "report.html"
    done = otel_budget("report", str(path), "--html", str(page))
    assert done.returncode == 0, done.stderr
    dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    assert "<title>otel-budget report</title>" in dom and "PWNED</title>" not in dom
    assert "<script" not in dom and "<img src=\"x\"" not in dom and "<svg" not in dom
    assert dom.count("&lt;script&gt;document.title='PWNED'&lt;/script&gt;") == 1  # shown, as text


def _env(**extra: str) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


class _HostileJaeger(BaseHTTPRequestHandler):
    """A query API that answers with a hostile service name, and one trace whose cost is "NaN"."""

    def do_GET(self) -> None:  # noqa: N802
        service = "billing\x1b]0;pwned\x07\x9b2J"
        if self.path.startswith("/api/services"):
            body: dict = {"data": [service]}
        else:
            def trace(i: int, usd: object) -> dict:
                attrs = {**run_attributes(service, "done", 3, 1, 1.0, 900, 0.01), sc.USED_PREFIX + "usd": usd}
                return {"traceID": f"\x1b[2J{i}", "spans": [
                    {"traceID": f"{i}", "spanID": f"{i}", "operationName": "invoke_agent x", "references": [],
                     "startTime": 1, "tags": [{"key": k, "value": v} for k, v in attrs.items()]}]}
            body = {"data": [trace(1, 0.01), trace(2, "NaN"), trace(3, 0.02)]}
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def test_a_hostile_jaeger_answer_is_escaped_and_its_nan_trace_skipped(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileJaeger)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = otel_budget("report", "--jaeger", url, "--progress")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr + done.stdout and "\x9b" not in done.stderr + done.stdout
    assert "billing\\x1b]0;pwned\\x07\\x9b2J: trace 2 (\\x1b[2J2): span 2: otel_budget.used.usd is 'NaN'" in done.stderr
    assert "reading billing\\x1b]0;pwned" in done.stderr  # the progress bar's label
    assert "1 of 3 inputs could not be read" in done.stderr and "0.0300" in done.stdout
