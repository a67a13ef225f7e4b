"""Compare per-test outcomes of a pass with otel-budget against the pass without it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: Outcomes of a test that works without us; any other outcome with us is a difference.
GOOD = frozenset({"passed", "skipped", "xfailed"})


@dataclass
class Comparison:
    """How one pass with us differs from the pass without us."""

    differences: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Test id -> (outcome without us, outcome with us), for tests that work without us."""
    broken_without_us: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Tests that fail without us (reported, not counted), with both outcomes."""
    only_with_us: list[str] = field(default_factory=list)
    """Tests that ran only with us (collected differently): reported."""
    by_contract: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Differences the contract itself makes (see `Suite.by_contract`): reported, not counted."""


def load(path: Path) -> dict[str, str]:
    """The outcomes a `peer_record` file holds ({} when the pass wrote none)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.items()}


def merge(*parts: dict[str, str]) -> dict[str, str]:
    """Outcomes of a pass run in several sessions (e.g. its serial tests apart)."""
    out: dict[str, str] = {}
    for part in parts:
        out.update(part)
    return out


def counts(outcomes: dict[str, str]) -> Counter[str]:
    return Counter(outcomes.values())


def compare(base: dict[str, str], other: dict[str, str], by_contract: tuple[str, ...] = ()) -> Comparison:
    """Differences of `other` (with us) from `base` (without us), test by test; ids starting with a
    `by_contract` prefix are set apart."""
    result = Comparison()
    for test_id, before in base.items():
        after = other.get(test_id, "missing")
        if before in GOOD:
            if after != before:
                into = result.by_contract if test_id.startswith(by_contract) else result.differences
                into[test_id] = (before, after)
        else:
            result.broken_without_us[test_id] = (before, after)
    result.only_with_us = sorted(set(other) - set(base))
    return result
