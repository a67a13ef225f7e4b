"""A paused run comes back as JSON that anyone may have edited: nonsense numbers are refused, and with a secret
an edit of any kind is refused. Counted at ScriptedLLM: what an edit would buy is calls that reach it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.metrics import MeterProvider

import otel_budget
from otel_budget import Budget, InvalidRunState
from otel_budget.testing import ToolCall, Turn

from . import _agent

PUSH = ToolCall("git_push", {"remote": "origin", "branch": "main"})
READ = Turn(tool_calls=[ToolCall("read_file", {"path": "NOTES"})], input_tokens=100, output_tokens=10)


@pytest.fixture(autouse=True)
def _clear_log():
    _agent.EXECUTED.clear()


def _paused(llm, oai) -> dict:
    """A run of max_steps=4 paused before git_push after 2 calls, as the JSON a person's queue would keep."""
    llm.script(READ, Turn(tool_calls=[PUSH]))
    run = _agent.start(oai, Budget(max_steps=4, approve=["git_push"]))
    assert run.outcome is not None and run.outcome.paused is not None
    assert len(llm.requests) == 2
    return json.loads(run.outcome.paused.model_dump_json())


def _sent_after_resume(llm, oai, saved: dict) -> int:
    """Resume (approved) with an agent that would read files forever; the calls that reached the server."""
    before = len(llm.requests)
    llm.default = READ
    _agent.go_on(oai, json.dumps(saved), approved=True)
    return len(llm.requests) - before


def test_an_unedited_paused_run_gets_the_two_calls_it_has_left(otel, llm, oai):
    assert _sent_after_resume(llm, oai, _paused(llm, oai)) == 2


@pytest.mark.parametrize(("field", "value"), [
    ("model_calls", -1), ("model_calls", -100), ("tool_calls", -100), ("input_tokens", -100),
    ("model_calls", 1.5), ("model_calls", True), ("cost_usd", math.nan), ("cost_usd", -100.0),
    ("seconds", math.inf), ("seconds", -100.0),
])
def test_nonsense_usage_is_refused_naming_the_field(otel, llm, oai, field, value):
    saved = _paused(llm, oai)
    saved["usage"][field] = value
    with pytest.raises(InvalidRunState, match=f"usage.{field}|{field}"):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2  # nothing more reached the server


@pytest.mark.parametrize(("field", "value"), [("max_steps", -100), ("max_steps", math.nan), ("max_usd", -1.0),
                                              ("max_steps", "many"), ("approve", ["x"]), ("max_steps", 0)])
def test_a_nonsense_budget_is_refused_naming_the_field(otel, llm, oai, field, value):
    saved = _paused(llm, oai)
    saved["budget"][field] = value
    with pytest.raises(InvalidRunState, match=f"budget.{field}"):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2


@pytest.mark.parametrize(("field", "value"), [("tools_requested", {"read_file": -5}), ("paused_at", math.nan),
                                              ("pending_tools", {"x": 1e999})])
def test_a_nonsense_count_or_time_is_refused(otel, llm, oai, field, value):
    saved = _paused(llm, oai)
    saved[field] = value
    with pytest.raises(InvalidRunState, match=field):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2


def test_a_paused_run_object_edited_in_memory_is_checked_again(otel, llm, oai):
    llm.script(READ, Turn(tool_calls=[PUSH]))
    paused = _agent.start(oai, Budget(max_steps=4, approve=["git_push"])).outcome.paused
    paused.usage.model_calls = -100  # no validation on assignment: resume() checks it again
    with pytest.raises(InvalidRunState, match="model_calls"):
        otel_budget.resume(paused, approved=True)


def _with_secret(secret: str = "s3cret") -> None:
    otel_budget.instrument(meter_provider=MeterProvider(), secret=secret)


@pytest.mark.parametrize("edit", ["usage zeroed", "cap raised", "policy null", "completed forged",
                                  "signature removed", "other secret"])
def test_with_a_secret_any_edit_is_refused(otel, llm, oai, edit):
    _with_secret()
    saved = _paused(llm, oai)
    assert saved["signature"]
    if edit == "usage zeroed":
        saved["usage"] = {}
    elif edit == "cap raised":
        saved["budget"]["max_steps"] = 100
    elif edit == "policy null":
        saved["policy"] = None
    elif edit == "completed forged":
        saved["completed"].append({"tool": "git_push", "arguments": {"remote": "origin", "branch": "main"},
                                   "result": "pushed"})
    elif edit == "signature removed":
        del saved["signature"]
    else:
        _with_secret("another")
    with pytest.raises(InvalidRunState, match="signed|signature"):
        _sent_after_resume(llm, oai, saved)
    assert len(llm.requests) == 2
    assert _agent.EXECUTED == [("read_file", {"path": "NOTES"})]


def test_with_a_secret_a_signed_paused_run_resumes_as_before(otel, llm, oai):
    _with_secret()
    saved = _paused(llm, oai)
    assert _sent_after_resume(llm, oai, saved) == 2
    assert ("git_push", {"remote": "origin", "branch": "main"}) in _agent.EXECUTED


def _resume_in_child(llm, tmp_path, saved: dict, env_secret: str | None) -> subprocess.CompletedProcess:
    path = tmp_path / "paused.json"
    path.write_text(json.dumps(saved))
    env = {k: v for k, v in __import__("os").environ.items() if k != "OTEL_BUDGET_SECRET"}
    if env_secret is not None:
        env["OTEL_BUDGET_SECRET"] = env_secret
    return subprocess.run(
        [sys.executable, _agent.__file__, llm.openai_base_url, str(path), "approve", str(tmp_path / "spans.jsonl")],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )


def test_a_signed_paused_run_resumes_in_another_process_with_the_same_secret(otel, llm, oai, tmp_path):
    _with_secret("shared-secret")
    saved = _paused(llm, oai)
    llm.script(Turn(text="Released."))
    child = _resume_in_child(llm, tmp_path, saved, "shared-secret")  # OTEL_BUDGET_SECRET in the child
    assert child.returncode == 0, child.stderr
    outcome = json.loads(child.stdout.strip().splitlines()[-1])["outcome"]
    assert outcome["stop_reason"] == "done" and outcome["usage"]["model_calls"] == 3
    assert "without a signature" not in child.stderr
    # the same paused run, edited, is refused by that process, and nothing reaches the server
    saved["budget"]["max_steps"] = 100
    before = len(llm.requests)
    child = _resume_in_child(llm, tmp_path, saved, "shared-secret")
    assert child.returncode != 0 and "InvalidRunState" in child.stderr and "changed after it was signed" in child.stderr
    assert len(llm.requests) == before


def test_without_a_secret_one_warning_per_process_says_so(tmp_path):
    script = textwrap.dedent("""
        import logging, otel_budget
        from otel_budget.fleet import propagation
        logging.basicConfig(level=logging.WARNING)
        otel_budget.instrument()

        @otel_budget.tool
        def git_push(branch: str) -> str:
            return "pushed"

        with otel_budget.run("release", budget=otel_budget.Budget(approve=["git_push"])) as run:
            git_push(branch="main")
        text = run.outcome.paused.model_dump_json()
        for _ in range(3):
            with otel_budget.resume(text, approved=False):
                pass
        with otel_budget.run("coordinator", budget=otel_budget.Budget(max_steps=5)):
            token = propagation.export_run()
        for _ in range(3):
            with propagation.attach_run(token):
                pass
        print("ok")
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "OTEL_BUDGET_SECRET"}
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env,
                           check=False)
    assert child.returncode == 0, child.stderr
    assert child.stderr.count("without a signature") == 1
    assert "OTEL_BUDGET_SECRET" in child.stderr
    # with a secret, no such warning
    env["OTEL_BUDGET_SECRET"] = "k"
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env,
                           check=False)
    assert child.returncode == 0, child.stderr
    assert "without a signature" not in child.stderr
