"""The sliding time window: partners within fixed bounds of a tuple's event time (Flink's interval join)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import model_validator

from windjoin.operators.spec_numbers import SignedWindowMillis, WindowMillis
from windjoin.operators.system_columns import TS
from windjoin.operators.windows.base import ProbeView, Reach, WindowKind
from windjoin.operators.windows.registry import register


@register
class TimeWindow(WindowKind):
    """Which event times pair: within `size_ms` of each other (|Δts| <= size_ms; 0 pairs equal times only), or with
    asymmetric bounds as Flink's interval join `between(lower, upper)`: lower_ms <= second.ts - first.ts <= upper_ms,
    first and second in the task's `join` order."""

    kind: Literal["time"]
    size_ms: WindowMillis | None = None
    lower_ms: SignedWindowMillis | None = None
    upper_ms: SignedWindowMillis | None = None

    task_bounds: ClassVar[bool] = True
    n_way: ClassVar[bool] = True

    @model_validator(mode="after")
    def _one_form(self) -> TimeWindow:
        given = [key for key in ("lower_ms", "upper_ms") if getattr(self, key) is not None]
        if self.size_ms is not None and given:
            raise ValueError(
                f"give size_ms (|Δts| <= size_ms) or lower_ms and upper_ms, not both (got size_ms, {given})"
            )
        if self.size_ms is None and len(given) < 2:
            missing = [key for key in ("lower_ms", "upper_ms") if key not in given]
            raise ValueError(
                f"a time window needs size_ms, or both lower_ms and upper_ms (missing {missing}; accepted: "
                "{kind: time, size_ms: 10000} or {kind: time, lower_ms: -300000, upper_ms: 60000})"
            )
        if self.lower_ms is not None and self.upper_ms is not None and self.lower_ms > self.upper_ms:
            raise ValueError(
                f"lower_ms: {self.lower_ms} is above upper_ms ({self.upper_ms}); accepted: lower_ms <= upper_ms"
            )
        return self

    @property
    def bounds(self) -> tuple[int, int]:
        """(lower, upper) on second.ts - first.ts."""
        if self.size_ms is not None:
            return -self.size_ms, self.size_ms
        assert self.lower_ms is not None and self.upper_ms is not None
        return self.lower_ms, self.upper_ms

    @property
    def symmetric(self) -> bool:
        lower, upper = self.bounds
        return lower == -upper

    def partners(self, probes: ProbeView) -> Reach:
        """lower <= partner.ts - ts <= upper for a first-stream probe; the bounds mirrored for a second-stream one."""
        assert probes.bounds is not None
        lower, upper = probes.bounds if probes.first else (-probes.bounds[1], -probes.bounds[0])
        ts = probes.ts.astype("int64")
        return Reach(TS, ts + lower, ts + upper)

    def closing(
        self, first: bool, bounds: tuple[int, int] | None, watermark_ms: int | None, count: int
    ) -> tuple[str, float] | None:
        """A later partner has an event time at or above the watermark: a first-stream tuple is closed once the
        watermark passes its time plus `upper`, a second-stream tuple once it passes its time less `lower`."""
        if watermark_ms is None:
            return None
        assert bounds is not None
        lower, upper = bounds
        return TS, watermark_ms - upper if first else watermark_ms + lower
