"""Provider and framework adapters. Each module only translates; the run and the ledger decide.

A library is patched when `instrument()` runs if it is already imported, else right after its first import
(a post-import hook), so `instrument()` never pays for importing frameworks the program does not use.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable

import wrapt

from ._patch import Patches

log = logging.getLogger(__name__)

#: Our module under this package -> the import that triggers it. Each module has `instrument(patches) -> bool`.
TRIGGERS: dict[str, str] = {
    "threads": "threading",  # threads and thread pools started in a run carry it (see threads.py)
    "openai": "openai",
    "anthropic": "anthropic",
    "litellm": "litellm",
    "google_genai": "google.genai",
    "openai_agents": "agents",
    "langchain": "langchain_core",
    "claude_agent_sdk": "claude_agent_sdk",
    "pydantic_ai": "pydantic_ai",
    "openllmetry": "opentelemetry.instrumentation.openai.v1",  # its Responses spans (see openllmetry.py)
}
MODULES: tuple[str, ...] = tuple(TRIGGERS)
#: Where each module lives under this package: provider SDKs under providers/, agent frameworks under frameworks/.
_PLACES = {"openai": "providers", "anthropic": "providers", "litellm": "providers", "google_genai": "providers",
           "openai_agents": "frameworks", "langchain": "frameworks", "claude_agent_sdk": "frameworks",
           "pydantic_ai": "frameworks"}

_lock = threading.RLock()
_active: Patches | None = None
_done: list[str] = []
_hooked: set[str] = set()


def _installed(target: str) -> bool:
    """Whether `target` may be imported, without importing the package it lives in (find_spec would)."""
    parent = target.rpartition(".")[0]
    if parent and parent not in sys.modules:
        return _installed(parent)  # a hook on a submodule that turns out to be missing never fires
    try:
        return importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        return False


def _patch_one(name: str) -> None:
    with _lock:
        if _active is None or name in _done:
            return
        try:
            module = importlib.import_module(".".join(filter(None, (__name__, _PLACES.get(name), name))))
            if module.instrument(_active):
                _done.append(name)
        except Exception:  # noqa: BLE001 - one broken integration must not stop the others
            log.warning("otel-budget: could not instrument %s", name, exc_info=True)


def _hook(name: str) -> Callable[[object], None]:
    def on_import(_module: object) -> None:
        _patch_one(name)

    return on_import


def instrument_all(patches: Patches) -> list[str]:
    """Patch every installed library now or on its first import; returns those patched so far."""
    global _active
    with _lock:
        _active = patches
        for name, target in TRIGGERS.items():
            if target in sys.modules:
                _patch_one(name)
            elif name not in _hooked and _installed(target):
                _hooked.add(name)
                wrapt.register_post_import_hook(_hook(name), target)
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
