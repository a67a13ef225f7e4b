"""One way to declare an adapter, in the shape of OTel contrib's `BaseInstrumentor`: what it patches, which versions
of which library, and how it says it cannot.

An adapter module declares `SPEC = AdapterSpec(...)`: the libraries it instruments as requirement strings (the first
is the library itself, as `instrumentation_dependencies()` gives them), its patch points, and what is lost when one
is missing. `apply(SPEC, patches)` is the one `instrument()` of every adapter: each point is patched once per
`instrument()` (a second `apply` finds it already ours), and `Patches.undo()` (`uninstrument()`) puts back the very
object each point held. A library outside the supported versions, or one that lacks a patch point, gets one warning
in the shared words (`CANNOT`) and has whatever it does have patched: a missing point never stops the others, nor
another adapter.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement

from ._patch import Patches

log = logging.getLogger(__name__)

#: The one warning of an adapter that cannot patch all it declares: the library and its version, then why.
CANNOT = "otel-budget: cannot fully instrument %s: %s"
#: What a missing patch point costs, unless its adapter or the point itself says better.
NOT_BUDGETED = "some of it is not budgeted"


@dataclass(frozen=True)
class PatchPoint:
    """`attribute` of `module` ("Class.method", or a module's own function), wrapped by `wrapper`.

    `wrapper` is a wrapt wrapper `(wrapped, instance, args, kwargs)`, which must let the call through on its own
    failure. With `replace`, it is instead a function of the original that returns the plain function to put in
    its place (where a wrapt proxy would not do), or None to leave the attribute as it is."""

    module: str
    attribute: str
    wrapper: Callable[..., Any]
    #: Only some versions or installs have it: its absence is not reported.
    optional: bool = False
    #: Also wrap every subclass's own `attribute` (another instrumentor may have wrapped one, bypassing the base's).
    subclasses: bool = False
    #: Put `wrapper(original)` in place instead of wrapping (see above).
    replace: bool = False
    #: What its absence costs, when not its adapter's `lost`.
    lost: str = ""

    def __str__(self) -> str:
        return f"{self.module}:{self.attribute}"


def points(module: str, wrappers: Mapping[str, Callable[..., Any]], **options: Any) -> tuple[PatchPoint, ...]:
    """One PatchPoint per `attribute: wrapper` of `module`, all with the same `options` (e.g. `optional=True`)."""
    return tuple(PatchPoint(module, attribute, wrapper, **options) for attribute, wrapper in wrappers.items())


@dataclass(frozen=True)
class AdapterSpec:
    """What an adapter patches, for which versions, and what is lost when it cannot."""

    #: Requirement strings ("openai-agents >= 0.2, < 1"). The first names the library: when it is not installed,
    #: nothing is patched. Each installed one outside its versions is reported, and patched all the same.
    requires: tuple[str, ...]
    #: The patch points, applied in order.
    patches: tuple[PatchPoint, ...]
    #: What a missing patch point costs, in the warning's words ("some of it is not budgeted").
    lost: str = NOT_BUDGETED
    #: Run before the patch points, for what is known only once the library is imported (its types, another
    #: instrumentor's wrappers); it may patch through `patches` too.
    setup: Callable[[Patches], None] | None = None


def apply(spec: AdapterSpec, patches: Patches) -> bool:
    """Patch what `spec` declares; False, with nothing patched, when its library is not installed."""
    checked = _versions(spec.requires)
    if checked is None:
        return False
    library, problems = checked
    if spec.setup is not None:
        spec.setup(patches)
    missing: dict[str, list[str]] = {}
    for point in spec.patches:
        try:
            patched = _patch(point, patches)
        except Exception:  # noqa: BLE001 - a point that cannot take our patch is missing; the others go on
            log.debug("otel-budget: could not patch %s", point, exc_info=True)
            patched = False
        if not patched and not point.optional:
            missing.setdefault(point.lost or spec.lost, []).append(str(point))
    problems += [f"it lacks {' and '.join(names)}, so {lost}" for lost, names in missing.items()]
    if problems:
        log.warning(CANNOT, library, "; ".join(problems))
    return True


def _versions(requires: tuple[str, ...]) -> tuple[str, list[str]] | None:
    """(the library and its version, the requirements found outside their versions); None when the library (the
    first requirement) is not installed."""
    library = "the standard library"
    problems: list[str] = []
    for index, text in enumerate(requires):
        requirement = Requirement(text)
        found = _version(requirement.name)
        if found is None:
            if index == 0:
                log.debug("otel-budget: %s is not installed; not patched", requirement.name)
                return None
            continue  # an optional part of the library, not installed: its points are skipped
        if index == 0:
            library = f"{requirement.name} {found}"
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{requirement.name} {found} is outside the versions supported "
                            f"({requirement.specifier}); what it has is patched all the same")
    return library, problems


@functools.cache
def _version(distribution: str) -> str | None:
    """The installed version of `distribution`, else None; read once per process (each read scans `sys.path`)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _patch(point: PatchPoint, patches: Patches) -> bool:
    """Patch one point (once per `instrument()`); False when it is missing from an installed package."""
    found = _owner(point)
    if found is None:
        return not installed(point.module.partition(".")[0])  # a part that is not installed is not missing
    owner, name = found
    if point.replace:
        patches.swap(owner, name, point.wrapper)
        return True
    patches.wrap(owner, name, point.wrapper)  # refuses a second wrap of a live patch of ours
    if point.subclasses:
        for cls in _subclasses(owner):
            if name in cls.__dict__:
                patches.wrap(cls, name, point.wrapper)
    return True


def _owner(point: PatchPoint) -> tuple[Any, str] | None:
    """(the object that holds the patched attribute in its own `__dict__`, the attribute's name), or None."""
    try:
        owner: Any = importlib.import_module(point.module)
    except Exception:  # noqa: BLE001 - a module that fails to import lacks its patch points; the others go on
        log.debug("otel-budget: could not import %s", point.module, exc_info=True)
        return None
    *path, name = point.attribute.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    return (owner, name) if name in getattr(owner, "__dict__", {}) else None


def installed(target: str) -> bool:
    """Whether module `target` may be imported, without importing the package it lives in (find_spec would)."""
    parent = target.rpartition(".")[0]
    if parent and parent not in sys.modules:
        return installed(parent)  # a hook on a submodule that turns out to be missing never fires
    try:
        return importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        return False


def _subclasses(cls: type) -> Iterator[type]:
    pending: list[type] = list(cls.__subclasses__())
    while pending:
        sub = pending.pop()
        pending.extend(sub.__subclasses__())
        yield sub
