"""Settling a call whose stream or response proxy is dropped unread: when the proxy is garbage-collected, or when
the interpreter exits with it still alive.

`watch = on_collect(obj, func, *args)` does what `weakref.finalize(obj, func, *args)` does for the proxies (call
`func` once: when `obj` is collected, at exit, or on `fire(watch)`; never after `detach(watch)`), at a fraction of its
cost: one plain weak reference with a callback (no Python class, so no Python frame to make one), kept alive in a
dict with its function and arguments until it fires or is detached. `weakref.finalize` builds a record object and a
registry entry in Python for every proxy, about a quarter of what setting up a stream costs us.
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

#: A watch: the weak reference to the watched object (kept alive by `_LIVE` until it fires or is detached).
Watch = weakref.ref

#: The watches that have neither fired nor been detached, by id: (the watch, its function, its arguments). A weak
#: reference whose only holder dies never calls its callback: this dict holds them.
_LIVE: dict[int, tuple[Watch, Callable[..., Any], tuple[Any, ...]]] = {}
#: Whether the exit hook is registered (at the first watch, as `weakref.finalize` does: an exit hook registered later
#: runs earlier, so calls settled at exit reach a tracer provider made before them while it still exports).
_hooked = [False]


def on_collect(obj: Any, func: Callable[..., Any], /, *args: Any) -> Watch:
    """Call `func(*args)` once: when `obj` is collected, at interpreter exit, or on `fire`; never after `detach`."""
    watch = weakref.ref(obj, fire)
    _LIVE[id(watch)] = (watch, func, args)
    if not _hooked[0]:
        _hooked[0] = True
        atexit.register(_at_exit)
    return watch


def detach(watch: Watch) -> tuple[Any, ...] | None:
    """Stop watching. The arguments when the watch was live (a tuple, never None), else None (fired or detached)."""
    entry = _LIVE.pop(id(watch), None)  # dict.pop is atomic: one caller gets it
    return None if entry is None else entry[2]


def fire(watch: Watch) -> None:
    """Call the watch's function now, unless it was called or detached before (also the weak reference's callback)."""
    entry = _LIVE.pop(id(watch), None)
    if entry is not None:
        entry[1](*entry[2])


def _at_exit() -> None:
    for watch, _, _ in list(_LIVE.values()):
        fire(watch)
