"""Short signatures of tool arguments and results: equal text, equal signature; never the content itself."""

from __future__ import annotations

import hashlib
from typing import Any

#: Hex digits kept of the SHA-256 of the canonical text (64 bits: collisions are not a practical concern here).
_DIGITS = 16


def signature(text: str) -> str:
    """The signature of a canonical text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGITS]


def arguments_signature(arguments: Any) -> str:
    """The signature of tool arguments (a JSON string or a value), after canonicalization."""
    from .node import canonical_arguments

    return signature(canonical_arguments(arguments))


def result_signature(result: Any) -> str:
    """The signature of a tool result: its text (stripped) when it is a string, else its canonical JSON."""
    if isinstance(result, str):
        return signature(result.strip())
    if isinstance(result, bytes):
        return hashlib.sha256(result).hexdigest()[:_DIGITS]
    return arguments_signature(result)
