"""The calls a slot makes on its state, as a protocol: Spark's state (`SparkSlotState`, what the job runs on)
or any other store with the same calls (the slot's unit tests run on dicts, `tests/support/slot_state.py`).

A slot keeps two things (`join_state`'s docstring): its metadata, one value (`slot_meta`'s stored form), and its
stored tuples as segments, Arrow IPC bytes by segment id (`segment_store`). A handful of calls per batch."""

from __future__ import annotations

from typing import Any, Protocol


class SlotState(Protocol):
    """One slot's state: its metadata and its segments."""

    def meta(self) -> bytes | None:
        """The stored metadata; None before the slot's first batch."""

    def set_meta(self, data: bytes) -> None: ...

    def segment(self, seg_id: int) -> bytes:
        """A stored segment (KeyError-like failure when it is not there: the meta lists only live segments)."""

    def put_segment(self, seg_id: int, data: bytes) -> None: ...

    def drop_segment(self, seg_id: int) -> None: ...


class SparkSlotState:
    """A slot's state in Spark's transformWithState store: a ValueState "meta" and a MapState "segments"."""

    def __init__(self, handle: Any) -> None:
        self._meta = handle.getValueState("meta", "meta binary")
        self._segments = handle.getMapState("segments", "id long", "data binary")

    def meta(self) -> bytes | None:
        return self._meta.get()[0] if self._meta.exists() else None

    def set_meta(self, data: bytes) -> None:
        self._meta.update((data,))

    def segment(self, seg_id: int) -> bytes:
        return self._segments.getValue((seg_id,))[0]

    def put_segment(self, seg_id: int, data: bytes) -> None:
        self._segments.updateValue((seg_id,), (data,))

    def drop_segment(self, seg_id: int) -> None:
        self._segments.removeKey((seg_id,))
