"""Run tokens on the wire: `otb1.<payload>` or, signed, `otb1.<payload>.<signature>`.

`<payload>` is the unpadded URL-safe base64 of the JSON payload (keys sorted, no spaces); `<signature>` the
unpadded URL-safe base64 of HMAC-SHA256 over those JSON bytes (as sent, not re-serialized), with the secret given to
`instrument(secret=...)` or OTEL_BUDGET_SECRET. Every field read back is checked: a damaged token, a nonsense
number, an edited signed token or an unsigned one where a secret is configured raise `InvalidRunState`.

Payload fields: `v` (1), `run` (name), `tree` (the tree's store scope, `run:...`), `limits` ({dim: left}),
`scopes` ([{"name", "limits", "window"}]), optionally `deadline` (Unix time), `tp` / `ts` (W3C trace context).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ..core import trust
from ..core.ledger import DIMS
from ..model.trust import InvalidRunState, amount, canonical, count, sign, signed_by

#: Every token starts with this (format version 1).
TOKEN_PREFIX = "otb1."
TREE_PREFIX = "run:"
_INT_DIMS = {"steps", "tool_calls", "input_tokens", "output_tokens", "total_tokens"}
_WHAT = "a damaged otel-budget run token"


def encode(payload: dict[str, Any]) -> str:
    """The token of `payload`, signed when a secret is configured."""
    raw = canonical(payload)
    token = TOKEN_PREFIX + _b64(raw)
    key = trust.secret()
    return token if key is None else f"{token}.{sign(raw, key)}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: Any, *, signed: bool = False) -> dict[str, Any]:
    """The checked payload of `token`. `signed`: refuse a token without a valid signature (even without a secret
    configured, which then refuses every token)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise InvalidRunState("not an otel-budget run token (it should start with 'otb1.')")
    body, _, signature = token[len(TOKEN_PREFIX):].partition(".")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        payload = json.loads(raw)
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise InvalidRunState(f"{_WHAT}: its payload is not base64 JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict):
        raise InvalidRunState(f"{_WHAT}: its payload is {type(payload).__name__}, not an object")
    _verify(raw, signature, signed)
    return _checked(payload)


def _verify(raw: bytes, signature: str, signed: bool) -> None:
    key = trust.secret()
    if key is None:
        if signed:
            raise InvalidRunState("only a signed run token is accepted here, and no secret is configured to check "
                                  "one: give instrument(secret=...) or OTEL_BUDGET_SECRET, the coordinator's secret")
        trust.warn_unsigned("a run token was")
        return
    if not signature:
        raise InvalidRunState("the run token is not signed, and a secret is configured: it was exported without "
                              "the secret, or its signature was removed. Give the coordinator the same secret.")
    if not signed_by(raw, signature, key):
        raise InvalidRunState("the run token was changed after it was signed (or signed with another secret): "
                              "refused. Pass the token as the coordinator exported it.")


def _checked(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with every field checked (types, finite numbers >= 0), or InvalidRunState naming the field."""
    if payload.get("v") != 1:
        raise InvalidRunState(f"{_WHAT}: v={payload.get('v')!r}, this version reads v=1")
    tree = payload.get("tree")
    if not isinstance(tree, str) or not tree.startswith(TREE_PREFIX) or len(tree) > 200:
        raise InvalidRunState(f"{_WHAT}: tree={tree!r} is not a run tree scope ('run:...')")
    out: dict[str, Any] = {"v": 1, "tree": tree, "run": _text(payload, "run", ""),
                           "limits": limits(payload.get("limits", {}), "limits")}
    scopes = payload.get("scopes", [])
    if not isinstance(scopes, list):
        raise InvalidRunState(f"{_WHAT}: scopes={scopes!r} is not a list")
    out["scopes"] = [scope_of(s, f"scopes[{i}]") for i, s in enumerate(scopes)]
    if payload.get("deadline") is not None:
        out["deadline"] = amount(payload["deadline"], "deadline", _WHAT)
    for key in ("tp", "ts"):
        if payload.get(key) is not None:
            out[key] = _text(payload, key, "")
    return out


def limits(value: Any, field: str, what: str = _WHAT) -> dict[str, float]:
    """{dim: remaining} with known dims, whole counts and finite amounts >= 0."""
    if not isinstance(value, dict):
        raise InvalidRunState(f"{what}: {field}={value!r} is not an object of dimension -> number")
    out: dict[str, float] = {}
    for dim, v in value.items():
        if dim not in DIMS:
            raise InvalidRunState(f"{what}: {field}.{dim} is not a dimension (one of {', '.join(DIMS)})")
        out[dim] = float(count(v, f"{field}.{dim}", what)) if dim in _INT_DIMS else amount(v, f"{field}.{dim}", what)
    return out


def scope_of(value: Any, field: str, what: str = _WHAT) -> dict[str, Any]:
    """A fleet scope as a token or a tree record carries it: {"name", "limits", "window"}."""
    if not isinstance(value, dict):
        raise InvalidRunState(f"{what}: {field}={value!r} is not a scope")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRunState(f"{what}: {field}.name={name!r} is not a scope name")
    window = value.get("window")
    if window is not None and (amount(window, f"{field}.window", what) <= 0):
        raise InvalidRunState(f"{what}: {field}.window={window!r} is not a positive number of seconds")
    return {"name": name, "limits": limits(value.get("limits", {}), f"{field}.limits", what),
            "window": None if window is None else float(window)}


def _text(payload: dict[str, Any], key: str, default: str) -> str:
    value = payload.get(key, default)
    if not isinstance(value, str):
        raise InvalidRunState(f"{_WHAT}: {key}={value!r} is not a string")
    return value
