"""Patches that remember the very object they replaced, so `uninstrument()` restores it by identity.

Undo never clobbers someone else's work: when the attribute no longer holds our patch (another instrumentor
wrapped over it, or put its own object back), it is left as it is, and our patch, still reachable inside theirs,
passes every call through untouched from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import wrapt

log = logging.getLogger(__name__)

_MISSING = object()
#: The base class of every wrapt proxy and function wrapper (wrapt 2 names it BaseObjectProxy).
PROXY: type = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


class _Generation:
    """The patches of one `instrument()`: once undone, the ones left inside other wrappers pass calls through."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = True


class Patches:
    """A list of (owner, attribute, original, our patch) to undo in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, Any]] = []
        self._generation = _Generation()
        self._children: list[Patches] = []

    def child(self) -> Patches:
        """Patches of their own, to be undone and put back apart from these (see `_peers`); undone first when these
        are."""
        child = Patches()
        self._children.append(child)
        return child

    def wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> bool:
        """Wrap `owner.name` with a wrapt wrapper `(wrapped, instance, args, kwargs)`."""
        original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING:
            log.debug("otel-budget: %r has no attribute %s to patch", owner, name)
            return False
        if self._is_live_patch(original):
            return False

        generation = self._generation

        def guarded(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if not generation.live:
                return wrapped(*args, **kwargs)
            return wrapper(wrapped, instance, args, kwargs)

        guarded.otel_budget_generation = generation  # type: ignore[attr-defined]
        wrapt.wrap_function_wrapper(owner, name, guarded)
        self._undo.append((owner, name, original, owner.__dict__.get(name)))
        return True

    def _is_live_patch(self, obj: Any) -> bool:
        """Whether `obj` is a patch of ours from this `instrument()` (a wrapper's own function, never the wrapped
        one's: a wrapt proxy forwards other attribute lookups to what it wraps)."""
        if not isinstance(obj, PROXY):
            return False
        wrapper = getattr(obj, "_self_wrapper", None)
        return getattr(wrapper, "otel_budget_generation", None) is self._generation

    def replace(self, owner: Any, name: str, value: Any) -> None:
        """Set `owner.name = value`, remembering the original (for module-level functions)."""
        original = getattr(owner, name, _MISSING)
        setattr(owner, name, value)
        self._undo.append((owner, name, original, value))

    def swap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Set `owner.name = make(original)`, a plain function where a wrapt proxy would not do (`make` returns None
        to leave it); once per `instrument()`, as `wrap`."""
        original = owner.__dict__.get(name, _MISSING)
        if original is _MISSING or getattr(original, "otel_budget_generation", None) is self._generation:
            return
        value = make(original)
        if value is not None:
            value.otel_budget_generation = self._generation
            self.replace(owner, name, value)

    def undo(self) -> None:
        while self._children:
            self._children.pop().undo()
        self._generation.live = False
        self._generation = _Generation()
        while self._undo:
            owner, name, original, patched = self._undo.pop()
            current = (owner.__dict__ if hasattr(owner, "__dict__") else {}).get(name, _MISSING)
            if current is not patched:  # someone wrapped over ours or put theirs back: theirs stays
                log.debug("otel-budget: %r.%s is no longer our patch; leaving it (ours passes through)", owner, name)
                continue
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
        return [(owner, name, original) for owner, name, original, _ in self._undo]
