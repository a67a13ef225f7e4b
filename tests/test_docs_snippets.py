"""Every Python block of the README and the docs that can run offline runs, each as its own process.

A block runs with the preamble its type check gets (scripts/check_readme_types.py), the OpenAI and Anthropic
SDKs pointed at a ScriptedLLM by their own environment variables (so `openai.OpenAI()` works as written) and no
exporter. A block marked `<!-- not run: why -->` on the line before its fence is only type-checked; a block that
includes an example (`--8<-- "examples/x.py"`) is run by test_examples.py.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_budget.testing import ScriptedLLM, Turn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from check_readme_types import PREAMBLE, Snippet, default_files, snippets  # noqa: E402

FILES = default_files(ROOT)
ALL = [s for f in FILES for s in snippets(f)]
RUN = [s for s in ALL if s.not_run is None and s.include is None]


MODEL_CALLS = {"create", "completion", "generate_content", "run_sync", "invoke"}


def _calls_the_model(code: str) -> bool:
    """A model call made when the block runs (not inside a def) to the shared ScriptedLLM (not one of its own)."""
    tree = ast.parse(code)
    if "ScriptedLLM(" in code:
        return False
    running = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in MODEL_CALLS
               for node in running for call in ast.walk(node))


def _id(snippet: Snippet) -> str:
    return f"{snippet.path.relative_to(ROOT).as_posix()}:{snippet.line}"


def test_the_docs_have_blocks_that_run_and_every_other_block_says_why() -> None:
    assert len(RUN) >= 10, [_id(s) for s in RUN]
    for snippet in ALL:
        assert snippet.not_run is None or snippet.not_run.strip(), f"{_id(snippet)}: say why it cannot run"
    for snippet in ALL:
        if snippet.include:
            assert (ROOT / snippet.include).is_file(), f"{_id(snippet)}: no file {snippet.include}"


def test_the_readme_quick_start_runs_and_calls_the_model() -> None:
    readme = [s for s in RUN if s.path.name == "README.md"]
    assert readme and "otel_budget.run(" in readme[0].code and _calls_the_model(readme[0].code)
    assert sum(_calls_the_model(s.code) for s in RUN) >= 8, "the blocks that call the model at run time"


def test_every_relative_link_of_the_readme_resolves() -> None:
    """The README is read on the repository's page, outside the site `mkdocs build --strict` checks."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    local = [target for target in targets if "://" not in target]
    assert len(local) >= 10, local
    assert not [target for target in local if not (ROOT / target).is_file()]


@pytest.fixture(scope="module")
def llm():
    with ScriptedLLM() as server:
        server.default = Turn(text="Done.", input_tokens=300, output_tokens=20)
        yield server


@pytest.mark.parametrize("snippet", RUN, ids=[_id(s) for s in RUN])
def test_snippet_runs(snippet: Snippet, llm: ScriptedLLM, tmp_path: Path) -> None:
    llm.reset()
    llm.default = Turn(text="Done.", input_tokens=300, output_tokens=20)
    (tmp_path / "snippet.py").write_text(PREAMBLE + snippet.code, encoding="utf-8")
    env = {**os.environ, "OPENAI_BASE_URL": llm.openai_base_url, "OPENAI_API_KEY": "offline",
           "ANTHROPIC_BASE_URL": llm.anthropic_base_url, "ANTHROPIC_API_KEY": "offline",
           "GOOGLE_GEMINI_BASE_URL": llm.base_url, "GOOGLE_API_KEY": "offline", "OPENAI_AGENTS_DISABLE_TRACING": "1",
           "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BUDGET_DEFAULT", "OTEL_BUDGET_SECRET"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{_id(snippet)} failed:\n{done.stderr[-3000:]}"
    if _calls_the_model(snippet.code):  # the SDK's own variables led it to the scripted model, and it was asked
        assert llm.requests, f"{_id(snippet)} made no request to the scripted model"
