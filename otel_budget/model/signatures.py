"""Short signatures of tool arguments and results: equal text, equal signature; never the content itself."""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Hex digits kept of the SHA-256 of the canonical text (64 bits: collisions are not a practical concern here).
_DIGITS = 16


def signature(text: str) -> str:
    """The signature of a canonical text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGITS]


def arguments_signature(arguments: Any) -> str:
    """The signature of tool arguments (a JSON string or a value), after canonicalization."""
    return signature(canonical_arguments(arguments))


def result_signature(result: Any) -> str:
    """The signature of a tool result: its text (stripped) when it is a string, else its canonical JSON."""
    if isinstance(result, str):
        return signature(result.strip())
    if isinstance(result, bytes):
        return hashlib.sha256(result).hexdigest()[:_DIGITS]
    return arguments_signature(result)


def canonical_arguments(arguments: Any) -> str:
    """Tool arguments as one canonical string (JSON with sorted keys), for repetition checks.

    It never raises: arguments JSON cannot encode (too deep, circular, odd types) get a bounded digest instead.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: the text itself
            return arguments.strip()
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    except Exception:  # noqa: BLE001 - too deep, circular, or a value whose str() fails
        return _digest(arguments)


#: How many values `_digest` walks before it stops reading an argument structure.
_DIGEST_NODES = 100_000


def _digest(value: Any) -> str:
    """A deterministic digest of a nested value, walked without recursion and bounded in size and time."""
    digest = hashlib.sha256()
    stack: list[Any] = [value]
    seen = 0
    while stack and seen < _DIGEST_NODES:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            try:
                pairs = sorted(item.items(), key=lambda kv: _scalar_text(kv[0]))
            except Exception:  # noqa: BLE001 - keys that cannot even be compared as text
                pairs = list(item.items())
            digest.update(b"{%d" % len(pairs))
            for key, _ in pairs:
                digest.update(_scalar_text(key).encode("utf-8", "replace") + b"\x00")
            stack.extend(sub for _, sub in reversed(pairs))
        elif isinstance(item, (list, tuple)):
            digest.update(b"[%d" % len(item))
            stack.extend(reversed(item))
        else:
            digest.update(_scalar_text(item).encode("utf-8", "replace") + b"\x00")
    if stack:
        digest.update(b"...%d" % len(stack))
    return "sha256:" + digest.hexdigest()


def _scalar_text(item: Any) -> str:
    try:
        if isinstance(item, (str, int, float, bool)) or item is None:
            return f"{type(item).__name__}:{item}"
        return type(item).__name__ + ":" + str(item)[:1000]
    except Exception:  # noqa: BLE001 - a value whose str() fails (huge int, recursion) is known by its type only
        return type(item).__name__ + ":?"
