"""Request parameters the conventions name (temperature, top_p, ...), read from a request with a few lookups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...telemetry import semconv as sc

#: OpenAI-shaped request keys (chat completions, Responses, LiteLLM, Anthropic) -> attributes.
OPENAI_KEYS = {
    "temperature": sc.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": sc.GEN_AI_REQUEST_TOP_P,
    "top_k": sc.GEN_AI_REQUEST_TOP_K,
    "seed": sc.GEN_AI_REQUEST_SEED,
    "frequency_penalty": sc.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": sc.GEN_AI_REQUEST_PRESENCE_PENALTY,
}
#: Gemini `generationConfig` keys -> attributes.
GEMINI_KEYS = {
    "temperature": sc.GEN_AI_REQUEST_TEMPERATURE,
    "topP": sc.GEN_AI_REQUEST_TOP_P,
    "topK": sc.GEN_AI_REQUEST_TOP_K,
    "seed": sc.GEN_AI_REQUEST_SEED,
    "frequencyPenalty": sc.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "presencePenalty": sc.GEN_AI_REQUEST_PRESENCE_PENALTY,
}
_JSON_FORMATS = frozenset({"json_object", "json_schema", "json"})


def read(body: Mapping[str, Any], keys: Mapping[str, str], stop: str = "stop",
         choices: Any = None, output_format: Any = None) -> dict[str, Any] | None:
    """The attributes of the parameters a request sets (None when it sets none)."""
    out: dict[str, Any] = {}
    if not keys.keys().isdisjoint(body.keys()):  # (most requests set none of them: one check in C)
        for key, attr in keys.items():
            value = body.get(key)
            if value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[attr] = value
    sequences = body.get(stop)
    if sequences is None:
        pass
    elif isinstance(sequences, str):
        out[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = [sequences]
    elif isinstance(sequences, (list, tuple)) and sequences:
        out[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = [str(s) for s in sequences]
    if choices is not None and isinstance(choices, int) and not isinstance(choices, bool) and choices != 1:
        out[sc.GEN_AI_REQUEST_CHOICE_COUNT] = choices
    if output_format is not None:
        kind = output_type(output_format)
        if kind is not None:
            out[sc.GEN_AI_OUTPUT_TYPE] = kind
    return out or None


def output_type(fmt: Any) -> str | None:
    """`text` or `json` from an OpenAI `response_format` / Responses `text.format` / a Gemini MIME type."""
    if isinstance(fmt, Mapping):
        fmt = fmt.get("type")
    elif fmt is not None and not isinstance(fmt, str):  # a pydantic model class given to `.parse()`
        return sc.OUTPUT_JSON
    if not isinstance(fmt, str):
        return None
    if fmt in _JSON_FORMATS or fmt == "application/json":
        return sc.OUTPUT_JSON
    if fmt in ("text", "text/plain"):
        return sc.OUTPUT_TEXT
    return None


#: The last base URL read and its (address, port): a client's URL object is the same call after call.
_last: tuple[Any, tuple[str, int | None] | None] = (None, None)


def server(base_url: Any) -> tuple[str, int | None] | None:
    """(server.address, server.port) of a client's base URL (an httpx.URL or a string)."""
    global _last
    if base_url is None:
        return None
    last = _last
    if base_url is last[0]:  # URL objects and strings are immutable: the same object, the same answer
        return last[1]
    found = _server(base_url)
    _last = (base_url, found)
    return found


def _server(base_url: Any) -> tuple[str, int | None] | None:
    host = getattr(base_url, "host", None)
    if host is None:
        from urllib.parse import urlsplit

        parts = urlsplit(str(base_url))
        host, port, scheme = parts.hostname, parts.port, parts.scheme
    else:
        port, scheme = base_url.port, base_url.scheme
    if not host:
        return None
    if port is None:
        port = {"https": 443, "http": 80}.get(scheme)
    return str(host), port
