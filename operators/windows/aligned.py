"""Windows of fixed length aligned to epoch 0 (plus an offset): what tumbling and hopping windows share.

Each tuple stands in every window holding its event time, as a copy of its own (Flink's window table-valued
functions do the same): window starts `offset + j * hop_ms`, a window `[start, start + size_ms)`. Two tuples pair in
a window when both copies stand in it (their starts are equal) and the predicates hold, so a pair comes out once per
window holding both, and an outer, semi or anti task's flags are per window: a tuple alone in one window comes out
for that window. A copy can pair no more once the watermark reaches its window's end.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from windjoin.operators.system_columns import WSTART
from windjoin.operators.windows.base import ProbeView, Reach, WindowKind

NOT_YET = (
    "a tumbling or hopping window's copies of a tuple are not cut over slots or onto disk yet (moves of whole "
    "partitions and splits by key are fine)"
)


class AlignedWindow(WindowKind):
    """A window kind whose windows are `[offset_ms + j * hop, offset_ms + j * hop + size_ms)`; subclasses declare
    `size_ms`, `offset_ms` and say what the hop is."""

    copies: ClassVar[bool] = True
    spreads: ClassVar[str | None] = NOT_YET
    spills: ClassVar[str | None] = NOT_YET

    @property
    def hop(self) -> int:
        raise NotImplementedError

    @property
    def offset(self) -> int:
        return self.offset_ms  # type: ignore[attr-defined]

    @property
    def window_ms(self) -> int:
        return self.size_ms  # type: ignore[attr-defined]

    @property
    def bounds(self) -> tuple[int, int]:
        """Two tuples of one window lie less than its length apart."""
        return -(self.window_ms - 1), self.window_ms - 1

    def window_starts(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each tuple's windows, newest start first: the starts in (ts - size, ts], `size / hop` of them."""
        per = self.window_ms // self.hop
        ts = np.asarray(ts, dtype=np.int64)
        last = (ts - self.offset) // self.hop * self.hop + self.offset
        rows = np.repeat(np.arange(len(ts)), per)
        starts = np.repeat(last, per) - np.tile(np.arange(per, dtype=np.int64) * self.hop, len(ts))
        return rows, starts

    def partners(self, probes: ProbeView) -> Reach:
        """The copies standing in the same window."""
        assert probes.window_start is not None
        return Reach(WSTART, probes.window_start, probes.window_start)

    def closing(
        self, first: bool, bounds: tuple[int, int] | None, watermark_ms: int | None, count: int
    ) -> tuple[str, float] | None:
        """A later partner's event time is at or above the watermark: none lands in a window that ends by it."""
        if watermark_ms is None:
            return None
        return WSTART, watermark_ms - self.window_ms + 1

    def history_ms(self, bounds: tuple[int, int], second: bool) -> int:
        return self.window_ms - 1
