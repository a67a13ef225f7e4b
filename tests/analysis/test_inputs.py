"""Reading runs: malformed lines reported one by one, the Jaeger query API, progress on large inputs, and the
spans of real runs written by FileSpanExporter."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_budget
from otel_budget import cli
from otel_budget.analysis import read_file
from otel_budget.testing import ToolCall, Turn

from ._spans import run_attributes, write_runs


def _good_lines(tmp_path, n: int) -> list[str]:
    src = tmp_path / "src.jsonl"
    write_runs(src, (run_attributes("agent", "done", 5, 2, 3.0, 900, 0.01) for _ in range(n)), batch=1)
    return [line for line in src.read_text().splitlines() if "invoke_agent" in line]  # one run span each


def test_malformed_lines_are_reported_line_by_line_and_the_rest_counted(tmp_path, capsys):
    good = _good_lines(tmp_path, 5)
    bad_attr = json.loads(good[4])
    bad_attr["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"] = {"weirdValue": 1}
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join([
        good[0],
        "{not json",
        good[1],
        '{"resourceSpans": "nope"}',
        "",
        good[2],
        good[3][: len(good[3]) // 2],  # a line cut short (a crash while writing)
        json.dumps(bad_attr),
        '["a list"]',
    ]) + "\n")
    assert cli.main(["report", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith(str(path))]
    assert [line.split(":")[1] for line in errors] == ["2", "4", "7", "8", "9"]
    assert "not JSON" in errors[0] and "resourceSpans" in errors[1] and "weirdValue" in errors[3]
    assert "5 of 9 inputs could not be read" in captured.err
    assert json.loads(captured.out)["total"]["runs"] == 3  # lines 1, 3 and 6


def test_report_summarizes_runs_by_stop_reason_with_cost(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    write_runs(path, [
        *(run_attributes("a", "done", 3, 1, 1.0, 1000, 0.25) for _ in range(6)),
        *(run_attributes("a", "cost", 9, 4, 5.0, 9000, 1.00, limit="max_usd") for _ in range(2)),
        run_attributes("b", "steps", 25, 9, 9.0, 25000, 0.50, limit="max_steps"),
        run_attributes("b", "awaiting_approval", 4, 2, 2.0, 4000, 0.10),
    ])
    assert cli.main(["report", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["total"] == {"runs": 10, "cost_usd": pytest.approx(4.1), "avg_usd": pytest.approx(0.41)}
    assert list(result["by_reason"]) == ["done", "cost", "awaiting_approval", "steps"]
    assert result["by_reason"]["done"] == {"runs": 6, "cost_usd": pytest.approx(1.5), "avg_usd": pytest.approx(0.25)}
    assert result["by_reason"]["cost"]["cost_usd"] == pytest.approx(2.0)
    assert result["by_run"]["b"]["steps"]["runs"] == 1
    assert cli.main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "done" in text and "60.0%" in text and "4.1000" in text


class _Jaeger(BaseHTTPRequestHandler):
    """A stand-in for the Jaeger query API (Jaeger itself cannot be installed here)."""

    traces: list = []
    seen: list = []

    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        type(self).seen.append((url.path, parse_qs(url.query)))
        if url.path == "/api/services":
            body = {"data": ["billing", "jaeger-all-in-one"]}
        elif url.path == "/api/traces":
            limit = int(parse_qs(url.query)["limit"][0])
            body = {"data": self.traces[:limit], "total": 0, "limit": 0, "offset": 0, "errors": None}
        else:
            self.send_error(404)
            return
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def _jaeger_trace(i: int, reason: str, steps: int, usd: float) -> dict:
    trace_id = f"{i:032x}"
    tags = [{"key": k, "type": "float64" if isinstance(v, float) else "int64" if isinstance(v, int) else "string",
             "value": v} for k, v in run_attributes("billing", reason, steps, 1, 2.0, 100, usd).items()]
    return {
        "traceID": trace_id,
        "spans": [
            {"traceID": trace_id, "spanID": f"{i:016x}", "operationName": "invoke_agent billing", "references": [],
             "startTime": 1_700_000_000_000_000 + i, "duration": 2_000_000, "tags": tags, "processID": "p1"},
            {"traceID": trace_id, "spanID": f"{i + 1000:016x}", "operationName": "chat gpt-4o",
             "references": [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": f"{i:016x}"}],
             "startTime": 1_700_000_000_000_001 + i, "duration": 1000, "tags": [], "processID": "p1"},
        ],
        "processes": {"p1": {"serviceName": "billing", "tags": []}},
    }


@pytest.fixture
def jaeger():
    _Jaeger.traces = [_jaeger_trace(i, "done", i % 10 + 1, 0.01) for i in range(40)]
    _Jaeger.traces += [_jaeger_trace(100, "tokens", 50, 0.2), {"traceID": "broken", "spans": "x"}]
    _Jaeger.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Jaeger)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_recommend_reads_the_jaeger_query_api(jaeger, capsys):
    assert cli.main(["recommend", "--jaeger", jaeger, "--limit", "500", "--lookback", "7d", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    billing = result["billing"]
    assert (billing["done"], billing["stopped_at_limit"]) == (40, 1)
    assert billing["dimensions"]["steps"]["max"] == 10
    assert billing["eval_cases"] == [{"trace_id": f"{100:032x}", "stop_reason": "tokens", "limit": None}]
    assert "trace 42 (broken)" in captured.err
    # Every service but Jaeger's own was asked for, with the limit and lookback given.
    queries = [q for path, q in _Jaeger.seen if path == "/api/traces"]
    assert queries == [{"service": ["billing"], "limit": ["500"], "lookback": ["7d"]}]


def test_large_inputs_get_a_progress_bar_and_small_ones_do_not(tmp_path):
    lines = _good_lines(tmp_path, 3)
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(lines * 400) + "\n")  # 1200 lines
    err = io.StringIO()
    loaded = read_file(str(big), errors=err)
    assert len(loaded.runs) == 1200
    assert "\r" in err.getvalue() and "100%" in err.getvalue()
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(lines) + "\n")
    err = io.StringIO()
    read_file(str(small), errors=err)
    assert err.getvalue() == ""


def test_real_runs_recorded_by_file_span_exporter_are_analysed(llm, oai, tmp_path, capsys):
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(otel_budget.FileSpanExporter(path)))
    otel_budget.instrument(tracer_provider=provider)
    try:
        llm.default = Turn(text="ok", input_tokens=100, output_tokens=20)
        for _ in range(3):
            with otel_budget.run("summarizer", budget=otel_budget.Budget(max_steps=5)):
                oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        # A paused run that is resumed counts once, as its resumed part (which carries the paused usage).
        llm.script(Turn(tool_calls=[ToolCall("deploy", {"env": "prod"})], input_tokens=100, output_tokens=20))
        with otel_budget.run("deployer", budget=otel_budget.Budget(approve=["deploy"])) as first:
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "ship"}])
        with otel_budget.resume(first.outcome.paused, approved=True):
            oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "ship"}])
        provider.force_flush()
    finally:
        otel_budget.uninstrument()
        provider.shutdown()
    assert cli.main(["report", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["by_run"]["summarizer"]["done"]["runs"] == 3
    assert report["by_run"]["deployer"] == {
        "done": {"runs": 1, "cost_usd": pytest.approx(report["by_run"]["deployer"]["done"]["cost_usd"]),
                 "avg_usd": pytest.approx(report["by_run"]["deployer"]["done"]["avg_usd"])}
    }
    assert cli.main(["recommend", str(path), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["summarizer"]["dimensions"]["steps"]["p95"] == 1
    assert rec["summarizer"]["dimensions"]["total_tokens"]["p95"] == 120
    assert rec["deployer"]["dimensions"]["steps"]["max"] == 2  # both parts of the paused-and-resumed run
