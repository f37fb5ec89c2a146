"""The count window: partners among the other stream's `size` most recent arrivals."""

from __future__ import annotations

from typing import ClassVar, Literal

from windjoin.operators.spec_numbers import PositiveCount
from windjoin.operators.system_columns import SSEQ
from windjoin.operators.windows.base import ProbeView, Reach, WindowKind
from windjoin.operators.windows.registry import register

NUMBERS_EVERY_ARRIVAL = "a count window numbers every arrival of a partition, so one slot must see them all"


@register
class CountWindow(WindowKind):
    kind: Literal["count"]
    size: PositiveCount

    event_time: ClassVar[bool] = False
    counts_arrivals: ClassVar[bool] = True
    n_way: ClassVar[bool] = True
    splits: ClassVar[str | None] = NUMBERS_EVERY_ARRIVAL
    spreads: ClassVar[str | None] = NUMBERS_EVERY_ARRIVAL
    spills: ClassVar[str | None] = "a count window numbers every arrival, the clean-up merges generations out of order"
    pooled: ClassVar[bool] = False

    def partners(self, probes: ProbeView) -> Reach:
        """Stored partners arrived before the probe exactly when their sseq < seen: the last `size` of them."""
        assert probes.seen is not None
        return Reach(SSEQ, probes.seen - self.size, probes.seen - 1)

    def closing(
        self, first: bool, bounds: tuple[int, int] | None, watermark_ms: int | None, count: int
    ) -> tuple[str, float] | None:
        """A tuple leaves the window once `size` newer tuples of its stream have arrived."""
        return SSEQ, count - self.size

    def history_ms(self, bounds: tuple[int, int], second: bool) -> int:
        raise ValueError("a count window keeps tuples by count, not by event time")
