"""A slot's state in dicts (`pipelines.job.slot_state.SlotState`), for running the slot without Spark; copied
whole to stand for what Spark's checkpoint holds after a committed batch."""

from __future__ import annotations

import copy


class MemorySlotState:
    """`SlotState` over a value and a dict."""

    def __init__(self) -> None:
        self.stored_meta: bytes | None = None
        self.segments: dict[int, bytes] = {}

    def meta(self) -> bytes | None:
        return self.stored_meta

    def set_meta(self, data: bytes) -> None:
        self.stored_meta = data

    def segment(self, seg_id: int) -> bytes:
        return self.segments[seg_id]

    def put_segment(self, seg_id: int, data: bytes) -> None:
        self.segments[seg_id] = data

    def drop_segment(self, seg_id: int) -> None:
        self.segments.pop(seg_id, None)

    def saved(self) -> MemorySlotState:
        """A copy, as a checkpoint keeps it."""
        return copy.deepcopy(self)
