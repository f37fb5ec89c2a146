"""Adapted rows packed into Arrow IPC pieces per slot: bounded, complete, in arrival order, the same on replay."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.pipelines.job.slot_pieces import PIECE_SCHEMA, PieceBuffer, open_pieces
from windjoin.pipelines.job.stored_rows import from_ipc

SCHEMA = pa.schema([("slot", pa.int32()), ("n", pa.int64()), ("text", pa.string())])


def _batches(slots: list[int], cut: int, width: int) -> list[pa.RecordBatch]:
    n = len(slots)
    table = pa.table({"slot": pa.array(slots, pa.int32()), "n": np.arange(n), "text": ["x" * width] * n}, schema=SCHEMA)
    return [b for i in range(0, n, cut) for b in table.slice(i, cut).to_batches()]


def _pack(batches: list[pa.RecordBatch], max_rows: int, max_bytes: int) -> list[pa.RecordBatch]:
    buffer = PieceBuffer(SCHEMA, max_rows, max_bytes)
    out = [p for b in batches for p in buffer.add(b)]
    return out + list(buffer.flush())


@settings(max_examples=60, deadline=None)
@given(
    slots=st.lists(st.sampled_from([2, 0, 7]), max_size=300),
    cut=st.integers(1, 50),
    max_rows=st.integers(1, 64),
    width=st.sampled_from([0, 10, 2000]),
)
def test_every_row_reaches_its_slot_once_in_order_in_bounded_pieces(slots, cut, max_rows, width):
    max_bytes = 16_000
    packed = _pack(_batches(slots, cut, width), max_rows, max_bytes)
    by_slot: dict[int, list[bytes]] = {}
    for rows in packed:
        assert rows.schema == PIECE_SCHEMA
        for slot, piece in zip(rows.column("slot").to_pylist(), rows.column("piece").to_pylist(), strict=True):
            table = from_ipc(piece)
            assert 0 < table.num_rows <= max_rows
            assert table.num_rows == 1 or table.nbytes <= max_bytes  # one wide row may be a piece alone
            assert set(table.column("slot").to_pylist()) == {slot}
            by_slot.setdefault(slot, []).append(piece)
    for slot in set(slots):
        rows = open_pieces(by_slot[slot], SCHEMA).column("n").to_pylist()
        assert rows == [i for i, s in enumerate(slots) if s == slot]  # all of them, in arrival order
    assert set(by_slot) == set(slots)
    again = _pack(_batches(slots, cut, width), max_rows, max_bytes)
    assert [p.to_pydict() for p in again] == [p.to_pydict() for p in packed]  # a replay makes the same pieces


def test_no_pieces_open_to_the_empty_layout():
    assert open_pieces([], SCHEMA).schema == SCHEMA
    assert _pack([], 10, 1000) == []
