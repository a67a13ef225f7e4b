"""Settling a call whose stream or response proxy is dropped unread: when the proxy is garbage-collected, or when
the interpreter exits with it still alive.

`OnCollect(obj, func, *args)` does what `weakref.finalize(obj, func, *args)` does for the proxies (call `func` once:
when `obj` is collected, at exit, or when called; never after `detach()`), at a fraction of its cost: one weak
reference with a callback, kept alive in a dict until it fires or is detached. `weakref.finalize` builds a record
object and a registry entry in Python for every proxy, about a quarter of what setting up a stream costs us.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

#: The watches that have neither fired nor been detached, by id (a weak reference whose only holder dies never calls
#: its callback: this dict holds them).
_LIVE: dict[int, OnCollect] = {}
#: Whether the exit hook is registered (at the first watch, as `weakref.finalize` does: an exit hook registered later
#: runs earlier, so calls settled at exit reach a tracer provider made before them while it still exports).
_hooked = [False]


class OnCollect(weakref.ref):
    """Calls `func(*args)` once: when the object is collected, at interpreter exit, or when called; `detach()`
    stops it (it returns the arguments when the watch was still live, else None)."""

    __slots__ = ("func", "args")
    func: Callable[..., Any]
    args: tuple[Any, ...]

    def __new__(cls, obj: Any, func: Callable[..., Any], /, *args: Any) -> OnCollect:
        self = super().__new__(cls, obj, _collected)
        self.func = func
        self.args = args
        _LIVE[id(self)] = self
        if not _hooked[0]:
            _hooked[0] = True
            atexit.register(_at_exit)
        return self

    def __init__(self, obj: Any, func: Callable[..., Any], /, *args: Any) -> None:
        """(Everything is set by `__new__`: `weakref.ref.__init__` takes only an object and a callback.)"""

    def detach(self) -> tuple[Any, ...] | None:
        """Stop watching. The arguments when it was live (a tuple, never None), else None (fired or detached)."""
        if _LIVE.pop(id(self), None) is None:  # dict.pop is atomic: one caller gets it
            return None
        return self.args

    def __call__(self) -> None:  # type: ignore[override]
        """Call `func` now, unless it was called or detached before."""
        args = self.detach()
        if args is not None:
            self.func(*args)


def _collected(watch: OnCollect) -> None:
    watch()


def _at_exit() -> None:
    for watch in list(_LIVE.values()):
        watch()
