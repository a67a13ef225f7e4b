"""Our gates above other instrumentors' wrappers of the openai resource methods, kept on top (see `_peers`).

A gate goes on each method of `TARGETS` whose attribute holds another wrapper: at once when they were
instrumented first, and after every `instrument()` / `uninstrument()` of an OpenTelemetry instrumentor
(`BaseInstrumentor`, which OpenInference, OpenLLMetry and OTel contrib all build on). Around those, the gates are
lifted first, so a peer wraps (or unwraps) the method itself, never one of our gates, and the gates go back on
top after it. `uninstrument()` of ours takes them off with the rest, by identity.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..core import config
from ._patch import Patches
from ._peers import gate, gate_async, is_wrapper
from ._spec import AdapterSpec, PatchPoint

log = logging.getLogger(__name__)

#: The openai resource methods that make the calls we span, by module and class (async classes get the async
#: gate). Embeddings, images or legacy completions are not spanned by us, so their wrappers are left alone.
TARGETS: dict[str, tuple[tuple[str, bool], ...]] = {
    "openai.resources.chat.completions": (("Completions", False), ("AsyncCompletions", True)),
    "openai.resources.responses": (("Responses", False), ("AsyncResponses", True)),
}
_METHODS = ("create", "parse")

#: The gates' own patches, from the current `instrument()` (a child of its patches: undone with them).
_gates: list[Patches] = []


def _place() -> None:
    """Put a gate above every target that holds another wrapper (a second one on a gate of ours is refused)."""
    if not _gates or not config.get().instrumented:
        return
    for module, classes in TARGETS.items():
        loaded = sys.modules.get(module)  # never imported for this: a module not loaded holds no wrapper
        if loaded is None:
            continue
        for cls_name, is_async in classes:
            cls = getattr(loaded, cls_name, None)
            for name in _METHODS:
                if cls is not None and is_wrapper(cls.__dict__.get(name)):
                    _gates[0].wrap(cls, name, gate_async if is_async else gate)


def _lift() -> None:
    if _gates:
        _gates[0].undo()


def _setup(patches: Patches) -> None:
    _lift()  # a second `apply` of this spec: the gates it put are taken off, not doubled
    _gates[:] = [patches.child()]
    _place()


def _around(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An instrumentor's `instrument()` / `uninstrument()`: our gates off during it, back on top after it."""
    try:
        _lift()
    except Exception:  # noqa: BLE001 - their instrumentation must not fail because of ours
        log.warning("otel-budget: could not lift its gates above other instrumentors", exc_info=True)
    try:
        return wrapped(*args, **kwargs)
    finally:
        try:
            _place()
        except Exception:  # noqa: BLE001
            log.warning("otel-budget: could not keep other instrumentors' spans of a call quiet", exc_info=True)


_BASE = "opentelemetry.instrumentation.instrumentor"
SPEC = AdapterSpec(
    requires=("opentelemetry-instrumentation >= 0.51b0",),
    patches=(PatchPoint(_BASE, "BaseInstrumentor.instrument", _around),
             PatchPoint(_BASE, "BaseInstrumentor.uninstrument", _around)),
    setup=_setup,
)
