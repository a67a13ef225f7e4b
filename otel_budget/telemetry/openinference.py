"""The OpenInference twins of our GenAI attributes: added only when asked for (`instrument(openinference=True)` or
OTEL_BUDGET_OPENINFERENCE), for Arize AX and Phoenix before 15.10."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from . import semconv as sc

if TYPE_CHECKING:
    from ..model.call import ModelCall

#: Request attributes whose llm.invocation_parameters key is not their last name segment.
_INVOCATION_NAMES = {sc.GEN_AI_REQUEST_CHOICE_COUNT: "n", sc.GEN_AI_OUTPUT_TYPE: "output_type"}
#: llm.invocation_parameters JSON per call shape (model, output limit, request parameters): the same few recur.
_INVOCATIONS: dict[tuple[Any, ...], str] = {}
_INVOCATIONS_MAX = 256
_SCALARS = (str, int, float, bool)


def call_attributes(attrs: dict[str, Any], call: ModelCall) -> None:
    """Add the OpenInference twins of a finished call's GenAI attributes (the opt-in)."""
    attrs[sc.OI_LLM_MODEL_NAME] = call.response_model or call.model
    u = call.usage
    if u is not None:
        attrs[sc.OI_TOKEN_PROMPT] = u.input_tokens
        attrs[sc.OI_TOKEN_COMPLETION] = u.output_tokens
        attrs[sc.OI_TOKEN_TOTAL] = u.input_tokens + u.output_tokens
        if u.cache_read:
            attrs[sc.OI_TOKEN_CACHE_READ] = u.cache_read
        if u.cache_write:
            attrs[sc.OI_TOKEN_CACHE_WRITE] = u.cache_write
        if u.reasoning:
            attrs[sc.OI_TOKEN_REASONING] = u.reasoning
    if call.cost_usd is not None:
        attrs[sc.OI_COST_TOTAL] = attrs[sc.COST_USD]
        if call.cost_input_usd is not None:
            attrs[sc.OI_COST_PROMPT] = _money(call.cost_input_usd)
            attrs[sc.OI_COST_COMPLETION] = _money(call.cost_usd - call.cost_input_usd)


def from_env() -> bool:
    """Whether OTEL_BUDGET_OPENINFERENCE asks for the OpenInference twins."""
    return os.environ.get(sc.ENV_OPENINFERENCE, "").strip().lower() in {"1", "true", "yes", "on"}


def invocation_json(call: ModelCall) -> str:
    """The request's invocation parameters as JSON, from a bounded cache when its values are plain scalars
    (their types are part of the key: `1`, `1.0` and `True` are equal in Python, not in JSON)."""
    params = call.params or {}
    key: tuple[Any, ...] | None = (call.model, type(call.max_output_tokens), call.max_output_tokens)
    for attr, value in params.items():
        if type(value) not in _SCALARS:
            key = None
            break
        key += (attr, type(value), value)  # type: ignore[operator]
    if key is not None and (text := _INVOCATIONS.get(key)) is not None:
        return text
    invocation: dict[str, Any] = {"model": call.model}
    if call.max_output_tokens is not None:
        invocation["max_tokens"] = call.max_output_tokens
    for attr, value in params.items():
        invocation[_INVOCATION_NAMES.get(attr) or attr.rsplit(".", 1)[-1]] = value
    text = json.dumps(invocation, default=str)
    if key is not None:
        if len(_INVOCATIONS) >= _INVOCATIONS_MAX:
            _INVOCATIONS.clear()
        _INVOCATIONS[key] = text
    return text


def _money(usd: float) -> float:
    return round(usd, 10)  # as the recorder rounds costs
