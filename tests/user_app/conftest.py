"""A user's machine: a fresh virtual environment with otel-budget installed from its wheel (plus the openai
SDK and opentelemetry-distro), in which `app.py` runs as a separate process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_budget.testing import ScriptedLLM, Turn

from ._otlp import Receiver

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("app.py")


def _uv() -> str:
    found = Path(sys.executable).with_name("uv")
    return str(found) if found.exists() else "uv"


@pytest.fixture(scope="session")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a venv holding the wheel of this checkout, openai and opentelemetry-distro."""
    base = tmp_path_factory.mktemp("user")
    subprocess.run([_uv(), "build", "--wheel", "--out-dir", str(base / "dist"), str(ROOT)], check=True,
                   capture_output=True, timeout=600)
    (wheel,) = (base / "dist").glob("otel_budget-*.whl")
    subprocess.run([_uv(), "venv", "-q", "--python", sys.executable, str(base / "venv")], check=True,
                   capture_output=True, timeout=120)
    python = base / "venv" / "bin" / "python"
    subprocess.run([_uv(), "pip", "install", "-q", "--python", str(python), f"{wheel}[openai]",
                    "opentelemetry-distro"], check=True, capture_output=True, timeout=600)
    return python.parent


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def scripted() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        server.default = Turn(text="ok", input_tokens=10, output_tokens=5)
        yield server


def run_app(bin_dir: Path, mode: str, env: dict[str, str], llm: ScriptedLLM, *, zero_code: bool = False,
            cwd: Path | None = None) -> dict:
    """Run app.py in the user venv with only `env` (plus PATH) set; returns its JSON line."""
    argv = [str(bin_dir / "python"), str(APP), mode]
    if zero_code:
        argv = [str(bin_dir / "opentelemetry-instrument"), *argv]
    clean = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "APP_LLM_URL": llm.openai_base_url, **env}
    done = subprocess.run(argv, env=clean, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}
