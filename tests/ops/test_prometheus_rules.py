"""`promtool test rules` over every rule unit test file, and `promtool check` of the rules and config."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .contract import PROMETHEUS_DIR, RULES_DIR

TEST_FILES = sorted(RULES_DIR.glob("*.test.yaml"))
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yaml"))


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: run scripts/ensure_services.sh (make test does)")
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_every_rule_file_has_a_unit_test_file() -> None:
    assert RULE_FILES
    tested = {f for t in TEST_FILES for f in yaml.safe_load(t.read_text())["rule_files"]}
    assert {p.name for p in RULE_FILES} <= tested


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    result = _run("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_accepts_rules_and_the_prometheus_config(tmp_path: Path) -> None:
    result = _run("check", "rules", *(p.name for p in RULE_FILES), cwd=RULES_DIR)
    assert result.returncode == 0, result.stdout + result.stderr
    # Point the container path of rule_files at this checkout, then check the whole config.
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["rule_files"] = [str(RULES_DIR / Path(p).name) for p in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = _run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout
