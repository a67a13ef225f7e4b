"""Provider and framework adapters. Each module only translates; the run and the ledger decide."""

from __future__ import annotations

import importlib
import logging

from ._patch import Patches

log = logging.getLogger(__name__)

#: Modules under this package, each with `instrument(patches) -> bool` (False when its library is absent).
MODULES: tuple[str, ...] = ("openai", "anthropic")


def instrument_all(patches: Patches) -> list[str]:
    """Patch every installed library; returns the names of those patched."""
    done = []
    for name in MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
            if module.instrument(patches):
                done.append(name)
        except Exception:  # noqa: BLE001 - one broken integration must not stop the others
            log.warning("otel-budget: could not instrument %s", name, exc_info=True)
    return done
