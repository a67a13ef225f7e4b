"""Patches that remember the very object they replaced, so `uninstrument()` restores it by identity."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import wrapt

log = logging.getLogger(__name__)

_MISSING = object()


class Patches:
    """A list of (owner, attribute, original) to undo in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> bool:
        """Wrap `owner.name` with a wrapt wrapper `(wrapped, instance, args, kwargs)`."""
        original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING:
            log.debug("otel-budget: %r has no attribute %s to patch", owner, name)
            return False
        if isinstance(original, wrapt.FunctionWrapper) and getattr(original, "_self_otel_budget", False):
            return False
        wrapt.wrap_function_wrapper(owner, name, wrapper)
        patched = owner.__dict__.get(name)
        if patched is not None:
            try:
                patched._self_otel_budget = True
            except AttributeError:  # pragma: no cover
                pass
        self._undo.append((owner, name, original))
        return True

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set `owner.name = value`, remembering the original (for module-level functions)."""
        original = getattr(owner, name, _MISSING)
        setattr(owner, name, value)
        self._undo.append((owner, name, original))

    def undo(self) -> None:
        while self._undo:
            owner, name, original = self._undo.pop()
            try:
                if original is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except Exception:  # noqa: BLE001
                log.warning("otel-budget: could not restore %r.%s", owner, name, exc_info=True)

    def __len__(self) -> int:
        return len(self._undo)

    def originals(self) -> list[tuple[Any, str, Any]]:
        return list(self._undo)
