"""Text of a user's exception, and what of it telemetry may carry.

An exception's message is content: a 401 body can echo the API key, a 400 body the prompt. With content capture
off, telemetry, stop details and wrap-ups carry `error_label` (the type and the HTTP status) only; with it on,
the message too, after `redact_keys`. Anything shaped like a key is redacted in both cases.
"""

from __future__ import annotations

import re
from typing import Any

#: Values shaped like credentials, wherever they appear in a text.
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_*\-]{12,}"  # OpenAI (sk-proj-, sk-svcacct-), Anthropic (sk-ant-), OpenRouter (sk-or-)
    r"|\b(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}|\bBasic\s+[A-Za-z0-9+/]{12,}=*"  # an Authorization header's value
    r"|\bAIza[0-9A-Za-z_\-]{20,}"  # Google API keys
    r"|\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|\bxox[abporst]-[A-Za-z0-9\-]{10,}"  # Slack tokens
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWTs
)
#: A named secret: `api_key=...`, `"x-api-key": "..."`, `password: ...` (the name is kept, the value is not).
_NAMED_SECRET = re.compile(
    r"(?i)\b((?:x-)?(?:api[_-]?key|goog-api-key|access[_-]?token|auth[_-]?token|secret|password|passwd|"
    r"authorization)[\"']?\s*[:=]\s*[\"']?)(?!\[redacted)([^\s\"',;}&]{6,})"
)
REDACTED = "[redacted]"


def redact_keys(text: str) -> str:
    """`text` with every value shaped like an API key, a bearer token or a named secret replaced."""
    text = _KEY_SHAPES.sub(REDACTED, text)
    return _NAMED_SECRET.sub(lambda m: m.group(1) + REDACTED, text)


def error_message(exc: BaseException) -> str:
    """`str(exc)`; its `repr` when `__str__` raises; the type name when both do. Content: see `error_detail`."""
    for render in (str, repr):
        try:
            return render(exc)
        except Exception:  # noqa: BLE001 - the user's exception cannot be printed this way
            continue
    return f"<unprintable {type(exc).__name__}>"


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an SDK's error carries (`status_code`, `status`, `code`, or on its `response`)."""
    holders: list[Any] = [exc]
    try:
        holders.append(getattr(exc, "response", None))
    except Exception:  # noqa: BLE001 - a property that raises
        pass
    for holder in holders:
        if holder is None:
            continue
        for attr in ("status_code", "status", "code"):
            try:
                value = getattr(holder, attr, None)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
                return value
    return None


def error_type(exc: BaseException) -> str:
    """The exception's type as its package names it: `openai.AuthenticationError`, `ValueError`."""
    cls = type(exc)
    package = (getattr(cls, "__module__", "") or "").split(".", 1)[0]
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if package in ("", "builtins", "__main__") else f"{package}.{name}"


def error_label(exc: BaseException) -> str:
    """`openai.AuthenticationError (HTTP 401)`: the type and the HTTP status, never the message."""
    status = http_status(exc)
    return f"{error_type(exc)} (HTTP {status})" if status is not None else error_type(exc)


def error_detail(exc: BaseException, capture: bool, limit: int = 500) -> str:
    """What telemetry, a stop detail or a wrap-up may say of an exception: its label with capture off; with
    capture on, the message too (keys redacted). Our own exceptions (a budget stop, an unknown price) say only
    what the library wrote (their class says `content_free = True`), so their message is kept."""
    if not capture and getattr(type(exc), "content_free", False) is not True:
        return error_label(exc)
    text = f"{error_label(exc)}: {redact_keys(error_message(exc))}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(exc: BaseException) -> str:
    """`Type: message` of an exception (see `error_message`), for the user's own eyes only (never telemetry)."""
    return f"{type(exc).__name__}: {error_message(exc)}"
