"""Provider and framework adapters. Each module only translates; the run and the ledger decide."""

from __future__ import annotations

import importlib
import logging

from ._patch import Patches

log = logging.getLogger(__name__)

#: Modules under this package, each with `instrument(patches) -> bool` (False when its library is absent).
MODULES: tuple[str, ...] = (
    "openai",
    "anthropic",
    "litellm",
    "google_genai",
    "openai_agents",
    "langchain",
    "claude_agent_sdk",
)


def instrument_all(patches: Patches) -> list[str]:
    """Patch every installed library; returns the names of those patched."""
    done = []
    for name in MODULES:
        try:
            try:
                module = importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name == f"{__name__}.{name}":
                    continue  # not written yet
                raise
            if module.instrument(patches):
                done.append(name)
        except Exception:  # noqa: BLE001 - one broken integration must not stop the others
            log.warning("otel-budget: could not instrument %s", name, exc_info=True)
    return done
