"""The hopping window join: windows of `size_ms` starting every `hop_ms`, so a tuple stands in `size_ms / hop_ms`
of them and a pair comes out once per window holding both (Flink's HOP)."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from windjoin.operators.spec_numbers import PositiveWindowMillis, WindowMillis
from windjoin.operators.windows.aligned import AlignedWindow
from windjoin.operators.windows.registry import register

MAX_WINDOWS_PER_TUPLE = 1024  # size_ms / hop_ms: copies of every tuple the join stores


@register
class HoppingWindow(AlignedWindow):
    """Windows `[offset_ms + j * hop_ms, offset_ms + j * hop_ms + size_ms)`."""

    kind: Literal["hopping"]
    size_ms: PositiveWindowMillis
    hop_ms: PositiveWindowMillis
    offset_ms: WindowMillis = 0

    @model_validator(mode="after")
    def _aligned(self) -> HoppingWindow:
        if self.size_ms % self.hop_ms:
            raise ValueError(
                f"size_ms: {self.size_ms} is not a multiple of hop_ms ({self.hop_ms}); accepted: size_ms = n * hop_ms"
            )
        if self.size_ms // self.hop_ms > MAX_WINDOWS_PER_TUPLE:
            raise ValueError(
                f"hop_ms: {self.hop_ms} puts each tuple in {self.size_ms // self.hop_ms} windows; accepted: "
                f"size_ms / hop_ms <= {MAX_WINDOWS_PER_TUPLE}"
            )
        if self.offset_ms >= self.hop_ms:
            raise ValueError(f"offset_ms: {self.offset_ms} is not below hop_ms ({self.hop_ms}); accepted: 0..hop_ms-1")
        return self

    @property
    def hop(self) -> int:
        return self.hop_ms
