"""State that comes back from outside the process (a `PausedRun`, a run token): its checks and its signature.

A signature is HMAC-SHA256 over the canonical JSON of the state (keys sorted, no spaces, UTF-8), with the
secret given to `instrument(secret=...)` or OTEL_BUDGET_SECRET, written as unpadded URL-safe base64. The
canonical form is what a TypeScript port computes too: `JSON.stringify` of the same object with sorted keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from typing import Any


class InvalidRunState(ValueError):
    """A paused run or a run token that cannot be trusted: damaged, with a nonsense number, edited after it was
    signed, unsigned where a signature is required, or unknown to the shared ledger. The message names what."""


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: JSON with sorted keys and no spaces, UTF-8."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(payload: Mapping[str, Any] | bytes, secret: bytes) -> str:
    """HMAC-SHA256 of `payload` (bytes, or a mapping's canonical JSON), as unpadded URL-safe base64."""
    data = payload if isinstance(payload, bytes) else canonical(payload)
    digest = hmac.new(secret, data, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def signed_by(payload: Mapping[str, Any] | bytes, signature: str, secret: bytes) -> bool:
    """Whether `signature` is this secret's signature of `payload` (constant-time comparison)."""
    return hmac.compare_digest(sign(payload, secret).encode(), str(signature).encode())


def count(value: Any, field: str, what: str) -> int:
    """A whole number >= 0 read from outside, or InvalidRunState naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _whole(value) or value < 0:
        raise InvalidRunState(f"{what}: {field}={value!r} is not a whole number >= 0")
    return int(value)


def amount(value: Any, field: str, what: str) -> float:
    """A finite number >= 0 read from outside, or InvalidRunState naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidRunState(f"{what}: {field}={value!r} is not a finite number >= 0")
    return float(value)


def _whole(value: int | float) -> bool:
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))
