"""OpenLLMetry's Responses API spans: one LLM span per request, whichever of us was instrumented first.

OpenLLMetry (`opentelemetry-instrumentation-openai`) wraps `Responses.create` / `parse` and opens its span only
after the call has returned (`responses_get_or_create_wrapper`; for a stream, right after it started), so
neither way in `_peers` reaches it: its wrapper is never inside our request wrapper, and no span of it is open
while we span the call. It reads OpenTelemetry's suppress-instrumentation key once, on entry. So a thin wrapper
of ours sits above each of those wrappers and enters it under that key (our request wrapper below still spans
the call, a refused one included): put there at once when OpenLLMetry was instrumented first, and right after
its `_instrument` when it comes after us.
"""

from __future__ import annotations

import logging
from typing import Any

from ._patch import Patches
from ._peers import is_wrapper, quiet
from ._spec import AdapterSpec, PatchPoint

log = logging.getLogger(__name__)

#: The model calls of the Responses API that OpenLLMetry spans after the call (`retrieve` / `cancel` are not ours).
_METHODS = ("create", "parse")


def _above(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not is_wrapper(wrapped):
        return wrapped(*args, **kwargs)
    with quiet():
        return wrapped(*args, **kwargs)


async def _above_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not is_wrapper(wrapped):
        return await wrapped(*args, **kwargs)
    with quiet():
        return await wrapped(*args, **kwargs)


def _hush(patches: Patches) -> None:
    """Put our thin wrapper above every Responses method that another instrumentor has wrapped."""
    from openai.resources import responses

    for cls, wrapper in ((responses.Responses, _above), (responses.AsyncResponses, _above_async)):
        for name in _METHODS:
            if is_wrapper(cls.__dict__.get(name)):
                patches.wrap(cls, name, wrapper)  # refuses to wrap a live patch of ours twice


#: The patches of the current `instrument()`, for `_after` to put our wrappers through.
_current: list[Patches] = []


def _keep_above(patches: Patches) -> None:
    """Stay above the Responses wrappers OpenLLMetry has already put."""
    _current[:] = [patches]
    _hush(patches)


def _after(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Stay above the wrappers each of its later `_instrument` puts."""
    result = wrapped(*args, **kwargs)
    try:
        if _current:
            _hush(_current[0])
    except Exception:  # noqa: BLE001 - their instrumentation must not fail because of ours
        log.warning("otel-budget: could not keep OpenLLMetry's Responses spans quiet", exc_info=True)
    return result


SPEC = AdapterSpec(
    requires=("opentelemetry-instrumentation-openai >= 0.62",),
    patches=(PatchPoint("opentelemetry.instrumentation.openai.v1", "OpenAIV1Instrumentor._instrument", _after),),
    setup=_keep_above,
)
