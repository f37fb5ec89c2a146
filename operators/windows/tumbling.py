"""The tumbling window join: tuples pair when one fixed, non-overlapping window holds both (Flink's TUMBLE)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from windjoin.operators.spec_numbers import PositiveWindowMillis, WindowMillis
from windjoin.operators.windows.aligned import AlignedWindow
from windjoin.operators.windows.registry import register


@register
class TumblingWindow(AlignedWindow):
    """Windows `[offset_ms + j * size_ms, offset_ms + (j + 1) * size_ms)`: each tuple in exactly one."""

    kind: Literal["tumbling"]
    size_ms: PositiveWindowMillis
    offset_ms: WindowMillis = 0

    @model_validator(mode="after")
    def _offset_within(self) -> TumblingWindow:
        if self.offset_ms >= self.size_ms:
            raise ValueError(
                f"offset_ms: {self.offset_ms} is not below size_ms ({self.size_ms}); accepted: 0..size_ms-1"
            )
        return self

    @property
    def hop(self) -> int:
        return self.size_ms
