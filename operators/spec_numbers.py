"""The join spec's numbers: strict (a YAML number, never text: pydantic's lax mode read "1_0" as 10) and bounded,
so that event times plus a window bound, sizes times counts and the like stay inside a signed 64-bit integer.

Unbounded, `size_ms: 9223372036854775807` gave no results without a word (the window's bounds wrapped around in
int64) and 2^63 a raw OverflowError. Each type says its range; pydantic's error names the key, the value and it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_WINDOW_MS = 10 * 365 * 86_400_000  # a window's reach: ten years
MAX_MS = 10**15  # any other duration (retention, lateness, timeouts): ~31,700 years, "forever", inside int64
MAX_COUNT = 2**31 - 1  # tuples in a count window, records per trigger, batches kept
MAX_BYTES = 1 << 50  # a PiB
MAX_WIDTH = 2**53  # a band's width: exact as a double, and a field's value plus it fits in int64

Millis = Annotated[int, Field(strict=True, ge=0, le=MAX_MS)]
PositiveMillis = Annotated[int, Field(strict=True, gt=0, le=MAX_MS)]
WindowMillis = Annotated[int, Field(strict=True, ge=0, le=MAX_WINDOW_MS)]
PositiveWindowMillis = Annotated[int, Field(strict=True, gt=0, le=MAX_WINDOW_MS)]
SignedWindowMillis = Annotated[int, Field(strict=True, ge=-MAX_WINDOW_MS, le=MAX_WINDOW_MS)]
PositiveCount = Annotated[int, Field(strict=True, gt=0, le=MAX_COUNT)]
PositiveBytes = Annotated[int, Field(strict=True, gt=0, le=MAX_BYTES)]
Width = (
    Annotated[int, Field(strict=True, ge=0, le=MAX_WIDTH)]
    | Annotated[float, Field(strict=True, ge=0, le=MAX_WIDTH, allow_inf_nan=False)]
)
