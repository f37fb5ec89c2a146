"""Numbers written as text, read strictly: ASCII digits, an optional sign, decimals as repr(float) writes them.

int() and float() also take "1_0", " 1 ", Unicode digits ("١") and thousands of digits; a value that crosses a
boundary (a recorded decision, a load report, a query's condition) is refused instead of read as something else.
"""

from __future__ import annotations

import re

MAX_CHARS = 64  # longer texts are refused before any conversion
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def plain_int(text: str) -> int | None:
    """The whole number `text` spells, or None when it is not one in plain ASCII digits."""
    return int(text) if isinstance(text, str) and len(text) <= MAX_CHARS and _WHOLE.fullmatch(text) else None


def plain_float(text: str) -> float | None:
    """The number `text` spells in decimals (maybe with an exponent), or None; never nan or inf, though a huge
    exponent still reads as inf (check finiteness where it matters)."""
    return float(text) if isinstance(text, str) and len(text) <= MAX_CHARS and _DECIMAL.fullmatch(text) else None
