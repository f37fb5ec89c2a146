"""A read task's adapted rows cross Spark as Arrow IPC *pieces*: one Spark row per (read task, slot, chunk).

The slots only want Arrow columns, yet a row-per-tuple DataFrame makes every tuple cross Python -> JVM -> shuffle
-> JVM -> pandas one by one (measured in `../shared/probes/blob_shuffle_floor.py`: 200,000 rows a batch, 1,156 ms
as rows, 557 ms as 4 IPC blobs). So the reader packs each slot's adapted rows into IPC streams of at most
`MAX_PIECE_ROWS` rows and `MAX_PIECE_BYTES` bytes (a Spark row and the state server's buffers stay small), Spark
shuffles the pieces by slot, and the slot opens them without copying. Pieces are cut by arrival in the read task,
so a replayed batch (same offsets, same epoch) makes the same pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from windjoin.pipelines.job.stored_rows import from_ipc, to_ipc

PIECE_SCHEMA = pa.schema([("slot", pa.int32()), ("piece", pa.binary())])
PIECE_DDL = "slot int, piece binary"
MAX_PIECE_ROWS = 65_536
MAX_PIECE_BYTES = 8 << 20


class PieceBuffer:
    """Collects a read task's adapted batches per slot and cuts them into pieces of bounded size."""

    def __init__(self, schema: pa.Schema, max_rows: int = MAX_PIECE_ROWS, max_bytes: int = MAX_PIECE_BYTES) -> None:
        self.schema = schema
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._held: dict[int, list[pa.RecordBatch]] = {}  # per slot label, batches not yet packed
        self._rows: dict[int, int] = {}
        self._bytes: dict[int, int] = {}

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Take an adapted batch; yield the pieces it completes (as Spark rows of PIECE_SCHEMA)."""
        if not batch.num_rows:
            return
        slots = batch.column("slot").to_numpy(zero_copy_only=False)
        order = np.argsort(slots, kind="stable")  # each slot's rows keep their arrival order
        labels, starts = np.unique(slots[order], return_index=True)
        ends = [*starts[1:].tolist(), len(order)]
        for label, start, end in zip(labels.tolist(), starts.tolist(), ends, strict=True):
            rows = batch.take(pa.array(order[start:end]))
            self._held.setdefault(label, []).append(rows)
            self._rows[label] = self._rows.get(label, 0) + rows.num_rows
            self._bytes[label] = self._bytes.get(label, 0) + rows.nbytes
            if self._rows[label] >= self.max_rows or self._bytes[label] >= self.max_bytes:
                yield from self._pack(label)

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The pieces of everything still held, slot by slot."""
        for label in sorted(self._held):
            yield from self._pack(label)

    def _pack(self, label: int) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(self._held.pop(label), schema=self.schema)
        self._rows.pop(label, None)
        self._bytes.pop(label, None)
        step = self.max_rows
        if table.nbytes > self.max_bytes:  # wide rows: fewer of them a piece
            step = max(1, min(step, table.num_rows * self.max_bytes // table.nbytes))
        chunks = [to_ipc(table.slice(i, step)) for i in range(0, table.num_rows, step)]
        yield pa.RecordBatch.from_arrays(
            [pa.array([label] * len(chunks), pa.int32()), pa.array(chunks, pa.binary())], schema=PIECE_SCHEMA
        )


def open_pieces(pieces: Iterable[bytes], schema: pa.Schema) -> pa.Table:
    """A slot's pieces of one batch as one table of adapted rows (empty: `schema`'s)."""
    tables = [from_ipc(p) for p in pieces]
    return pa.concat_tables(tables) if tables else schema.empty_table()
