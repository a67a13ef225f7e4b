"""Trace files are untrusted input: anyone who can write a span (or edit the file) chooses every name, reason and
number in it. This module holds the bounds put on what is read, and the escaping of what is printed.

- Numbers: every figure the analyses use (usage, caps, a turn's tokens and cost) must be finite, non-negative and
  at most MAX_FIGURE. A line holding anything else is reported and skipped like any unreadable line.
- JSON: NaN and Infinity are not JSON and are refused; nesting deeper than Python can parse, and content nested
  deeper than MAX_DEPTH, makes the line unreadable instead of raising RecursionError.
- Text: names, stop reasons, tool actions and wrap-ups are printed with control characters (C0, DEL, C1, and so
  every ESC sequence) and bidirectional overrides escaped, so a crafted trace cannot rewrite the terminal.
- JSON output never holds a bare NaN (`allow_nan=False`) nor a raw C1 or bidi character.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The largest figure accepted: 10^12 steps, tokens, seconds (31,000 years) or US dollars. Anything larger is
#: a damaged or forged span, and would overflow the arithmetic of `recommend` and the plots of `report --html`.
MAX_FIGURE = 1e12
#: Content (captured messages) nested deeper than this is refused.
MAX_DEPTH = 100

# Control characters: C0 (ESC included), DEL, C1 (CSI 0x9b included). Bidirectional overrides and isolates, and
# the Unicode line and paragraph separators, reorder or break lines as much as a newline does.
_CONTROLS = (*range(0x20), *range(0x7F, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
_ESCAPES = ({c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in _BIDI}
            | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
_ESCAPES_BUT_NEWLINE = {c: e for c, e in _ESCAPES.items() if c != 0x0A}
# In JSON text: DEL, C1 and bidi characters as \\u escapes (json.dumps escapes C0 itself).
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *_BIDI)}


class BadRecord(ValueError):
    """A span, value or line that cannot be read; the message says why."""


def printable(text: object) -> str:
    """`text` with every control character escaped (`\\x1b`, `\\n`, `\\x9b`, `\\u202e`): one safe line."""
    return str(text).translate(_ESCAPES)


def printable_lines(text: str) -> str:
    """Like `printable`, but newlines are kept: for text that is already laid out in lines."""
    return text.translate(_ESCAPES_BUT_NEWLINE)


def figure(value: Any, what: str) -> float:
    """`value` as a float, or BadRecord when it is not a number, not finite, negative or above MAX_FIGURE."""
    if isinstance(value, bool):
        raise BadRecord(f"{what} is not a number: {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadRecord(f"{what} is not a number: {printable(repr(value)[:40])}") from None
    if not math.isfinite(number) or number < 0 or number > MAX_FIGURE:
        raise BadRecord(f"{what} is {printable(repr(value)[:40])}: a figure must be finite, between 0 and "
                         f"{MAX_FIGURE:g}")
    return number


class TooDeep(BadRecord):
    """JSON nested deeper than can be read."""


def _constant(name: str) -> Any:
    raise BadRecord(f"{name} is not a JSON number")


def loads(text: str | bytes) -> Any:
    """Strict JSON: NaN and Infinity are refused, and nesting too deep raises BadRecord, not RecursionError."""
    try:
        return json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise TooDeep("nested too deeply to read") from None


def depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (0 for a scalar), counted without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            break
    return deepest


def dumps(value: Any, **kwargs: Any) -> str:
    """JSON text that is always JSON (no NaN) and safe in a terminal (no raw C1 or bidi characters)."""
    return json.dumps(value, allow_nan=False, **kwargs).translate(_JSON_ESCAPES)
