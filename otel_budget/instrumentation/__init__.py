"""Provider and framework adapters. Each module only translates; the run and the ledger decide.

A library is patched when `instrument()` runs if it is already imported, else right after its first import
(a post-import hook), so `instrument()` never pays for importing frameworks the program does not use.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable

import wrapt

from ._patch import Patches
from ._spec import apply, installed

log = logging.getLogger(__name__)

#: Our adapter module under this package -> the import that triggers it. Each module declares `SPEC`, an
#: `AdapterSpec` (what it patches, which versions, what is lost when it cannot: `_spec.py`); provider SDKs live
#: under providers/, agent frameworks under frameworks/ (docs/adding-an-integration.md).
TRIGGERS: dict[str, str] = {
    "threads": "threading",  # threads and thread pools started in a run carry it (see threads.py)
    "providers.openai": "openai",
    "providers.anthropic": "anthropic",
    "providers.litellm": "litellm",
    "providers.google_genai": "google.genai",
    "frameworks.openai_agents": "agents",
    "frameworks.langchain": "langchain_core",
    "frameworks.claude_agent_sdk": "claude_agent_sdk",
    "frameworks.pydantic_ai": "pydantic_ai",
    # our gates above other instrumentors' wrappers of the same call (see _peers.py, instrumentors.py)
    "instrumentors": "opentelemetry.instrumentation.instrumentor",
}
#: The names `instrumented_libraries()` gives: each module's own name ("openai", "langchain").
MODULES: tuple[str, ...] = tuple(module.rpartition(".")[2] for module in TRIGGERS)

_lock = threading.RLock()
_active: Patches | None = None
_done: list[str] = []
_hooked: set[str] = set()


def _patch_one(module: str) -> None:
    name = module.rpartition(".")[2]
    with _lock:
        if _active is None or name in _done:
            return
        try:
            if apply(importlib.import_module(f"{__name__}.{module}").SPEC, _active):
                _done.append(name)
        except Exception:  # noqa: BLE001 - one broken integration must not stop the others
            log.warning("otel-budget: could not instrument %s", name, exc_info=True)


def _hook(module: str) -> Callable[[object], None]:
    def on_import(_module: object) -> None:
        _patch_one(module)

    return on_import


def instrument_all(patches: Patches) -> list[str]:
    """Patch every installed library now or on its first import; returns those patched so far."""
    global _active
    with _lock:
        _active = patches
        for module, target in TRIGGERS.items():
            if target in sys.modules:
                _patch_one(module)
            elif module not in _hooked and installed(target):
                _hooked.add(module)
                wrapt.register_post_import_hook(_hook(module), target)
        return list(_done)


def uninstrument_all(patches: Patches) -> None:
    """Undo every patch; pending import hooks then do nothing."""
    global _active
    with _lock:
        patches.undo()
        _active = None
        _done.clear()


def patched() -> list[str]:
    """The libraries patched so far."""
    return list(_done)
