"""A paused run, saved as JSON, resumed by another Python process against the same ScriptedLLM."""

from __future__ import annotations

import json
import subprocess
import sys

from otel_budget import Budget
from otel_budget.testing import ToolCall, Turn

from . import _agent


def test_paused_run_resumes_from_json_in_a_new_process(otel, llm, oai, tmp_path):
    _agent.EXECUTED.clear()
    llm.script(
        Turn(tool_calls=[ToolCall("read_file", {"path": "CHANGELOG"})]),
        Turn(tool_calls=[ToolCall("git_push", {"remote": "origin", "branch": "main"})]),
    )
    first = _agent.start(oai, Budget(max_steps=4, approve=["git_push"]))
    paused = first.outcome.paused
    saved = tmp_path / "paused.json"
    saved.write_text(paused.model_dump_json())
    spans_file = tmp_path / "spans.jsonl"
    llm.script(Turn(tool_calls=[ToolCall("read_file", {"path": "CHANGELOG"})]), Turn(text="Released."))

    child = subprocess.run(
        [sys.executable, _agent.__file__, llm.openai_base_url, str(saved), "approve", str(spans_file)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.strip().splitlines()[-1])
    outcome = report["outcome"]
    # The budget came from the JSON: 2 calls before, 2 after; max_steps=4 still holds across processes.
    assert outcome["stop_reason"] == "done"
    assert outcome["usage"]["model_calls"] == 4
    assert outcome["usage"]["tool_calls"] == paused.usage.tool_calls + 1
    # The approved push ran once, in the child; the read done before the pause, asked for again, was answered
    # from the paused run's record instead of running twice.
    assert report["executed"] == [["git_push", {"remote": "origin", "branch": "main"}]]
    assert llm.requests[-1].body["messages"][-1]["content"] == "contents of CHANGELOG"
    assert len(llm.requests) == 4
    # Same trace: the child's run span is a child of the paused run span.
    spans = [s for line in spans_file.read_text().splitlines()
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    run_span = next(s for s in spans if s["name"] == "invoke_agent release")
    assert run_span["traceId"] == paused.trace_id == outcome["trace_id"]
    assert run_span["parentSpanId"] == paused.span_id
