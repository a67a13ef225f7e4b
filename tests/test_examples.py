"""Every example runs offline and ends with a stop and its honest wrap-up (each is its own process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_ends_with_a_stop_and_its_wrap_up(example: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OTEL_TRACES_EXPORTER": "none",
           "OTEL_METRICS_EXPORTER": "none"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, str(example), *(["--stuck"] if example.stem == "invoice_agent" else [])],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "Stopped" in out, out[-2000:]  # every wrap-up of a stopped run begins by saying so
    assert "The task is NOT complete" in out, out[-2000:]
