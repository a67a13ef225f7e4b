"""The TypeScript package's names are generated from semconv.py: the checked-in file is what the generator writes
now, so a name changed in either language alone fails here (and in js/test/semconv.test.mjs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from otel_budget.telemetry import semconv as sc

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_semconv", ROOT / "scripts" / "gen_semconv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_typescript_names_are_what_the_generator_writes_from_semconv_py():
    gen = _generator()
    assert gen.TARGET.read_text(encoding="utf-8") == gen.render(), (
        "js/src/telemetry/semconv.ts differs from semconv.py: run python scripts/gen_semconv.py")


def test_every_semconv_constant_is_exported_to_typescript():
    text = (ROOT / "js" / "src" / "telemetry" / "semconv.ts").read_text(encoding="utf-8")
    names = [n for n, v in vars(sc).items() if n.isupper() and isinstance(v, (str, tuple, frozenset, dict))]
    assert len(names) > 140
    for name in names:
        assert f"export const {name} = " in text, name


def test_the_check_mode_fails_on_a_drift(tmp_path, monkeypatch):
    gen = _generator()
    assert gen.main(["--check"]) == 0
    stale = tmp_path / "semconv.ts"
    stale.write_text(gen.render().replace('"stop.reason"', '"stop_reason"'), encoding="utf-8")
    monkeypatch.setattr(gen, "TARGET", stale)
    assert gen.main(["--check"]) == 1
