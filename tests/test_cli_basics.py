"""The command's basics: `--version`, and a demo that says which extra it needs."""

from __future__ import annotations

import sys

import pytest

import otel_budget
from otel_budget import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"otel-budget {otel_budget.__version__}"


def test_demo_without_the_openai_sdk_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the openai extra were not installed
    assert cli.main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "needs the openai package" in err and "pip install 'otel-budget[openai]'" in err
