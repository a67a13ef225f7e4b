"""`opentelemetry-instrument python app.py` with another instrumentation installed (opentelemetry-instrumentation-
openai-v2): a malformed OTEL_BUDGET_DEFAULT must not abort the auto-instrumentation. The other instrumentations
still load; ours logs the error at start-up and refuses every run, so nothing is sent unbudgeted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

from otel_budget.testing import ScriptedLLM, Turn

APP = Path(__file__).with_name("app.py")


@pytest.fixture
def ours_first(tmp_path: Path) -> Path:
    """A folder for PYTHONPATH holding otel-budget's metadata, so its entry point is found before every other
    instrumentor's (the order that aborted the rest) whatever order site-packages lists them in."""
    meta = Path(str(distribution("otel-budget")._path))  # type: ignore[attr-defined]
    shutil.copytree(meta, tmp_path / meta.name)
    return tmp_path


def _run(llm: ScriptedLLM, pythonpath: Path, default: str) -> tuple[dict, str]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(pythonpath), "APP_LLM_URL": llm.openai_base_url,
           "OTEL_BUDGET_DEFAULT": default, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}
    argv = [str(Path(sys.executable).with_name("opentelemetry-instrument")), sys.executable, str(APP)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_malformed_default_budget_refuses_every_run_and_the_rest_still_loads(ours_first):
    with ScriptedLLM() as llm:
        llm.default = Turn(text="ok")
        out, stderr = _run(llm, ours_first, '{"max_stepz": 2}')
        assert out["openai_v2_loaded"] is True  # the instrumentation after ours was loaded
        assert "OTEL_BUDGET_DEFAULT" in out["refused"] and "max_stepz" in out["refused"]
        assert "refuses to start run 'auto-app'" in out["refused"]
        assert llm.requests == []  # nothing was sent unbudgeted
        told = stderr[stderr.index("otel-budget: OTEL_BUDGET_DEFAULT"):]  # at start-up, before the app's output
        assert "max_stepz" in told and "every run is refused" in told


def test_a_valid_default_budget_applies_with_the_others_loaded(ours_first):
    with ScriptedLLM() as llm:
        llm.default = Turn(text="ok")
        out, _ = _run(llm, ours_first, '{"max_steps": 2}')
        assert out["openai_v2_loaded"] is True
        assert out["stop_reason"] == "steps" and len(llm.requests) == 2
