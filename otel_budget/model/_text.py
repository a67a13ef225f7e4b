"""Text of a user's exception that never raises itself: an exception whose `__str__` fails is still reported."""

from __future__ import annotations


def error_message(exc: BaseException) -> str:
    """`str(exc)`; its `repr` when `__str__` raises; the type name when both do."""
    for render in (str, repr):
        try:
            return render(exc)
        except Exception:  # noqa: BLE001 - the user's exception cannot be printed this way
            continue
    return f"<unprintable {type(exc).__name__}>"


def error_text(exc: BaseException) -> str:
    """`Type: message` of an exception (see `error_message`)."""
    return f"{type(exc).__name__}: {error_message(exc)}"
