"""A piece of a batch's results as the Redis tier stores it: compressed Arrow IPC chunks of bounded size, each
described by an index entry (its result-time range and where its rows sit in the piece).

A piece (one slot's results of one batch, in row order) is cut into chunks of at most `CHUNK_ROWS` rows and about
`CHUNK_BYTES` of Arrow data (a chunk ends at the first row that reaches the bound; one row larger than the bound is
a chunk alone), so that every Redis call that moves a chunk moves a bounded number of bytes. A chunk holds only the
streams' struct columns (and the window columns of a kind that has them), without schema metadata, as one Arrow IPC
stream compressed with zstd; `batch_id` and `emitted_at` are the same for every row of a piece and live in the
entry. Row numbers are implicit: the chunk's first row is `offset` in its piece, so row `i` of the chunk is `piece
<< PIECE_ROW_BITS | offset + i`.

An entry is text, `batch:piece:seq:min:max:offset:rows:emitted_at` (a sorted-set member scored by `min`, unique by
`batch:piece:seq`), so readers find the chunks of a time span with one range read and no per-row work in Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    META_TIMESTAMPS,
    PIECE_ROW_BITS,
    result_times,
    row_bytes,
    stream_timestamps,
    window_columns,
)

CHUNK_ROWS = 16_384
CHUNK_BYTES = 1 << 20  # Arrow bytes of a chunk before compression
_OPTIONS = ipc.IpcWriteOptions(compression="zstd")


@dataclass(frozen=True)
class ChunkEntry:
    """Where one chunk's rows are: batch, piece, chunk number in the piece, result-time range, first row's position
    in the piece, row count, and the piece's emission time."""

    batch: int
    piece: int
    seq: int
    min_time: int
    max_time: int
    offset: int
    rows: int
    emitted_at: int

    def member(self) -> str:
        """The entry as index text (see the module docstring)."""
        return (
            f"{self.batch}:{self.piece}:{self.seq}:{self.min_time}:{self.max_time}:{self.offset}:{self.rows}:"
            f"{self.emitted_at}"
        )

    @staticmethod
    def parse(member: bytes | str) -> ChunkEntry:
        text = member.decode() if isinstance(member, bytes) else member
        return ChunkEntry(*map(int, text.split(":")))

    @property
    def first_row(self) -> int:
        """The `row` number of the chunk's first row."""
        return (self.piece << PIECE_ROW_BITS) + self.offset


@dataclass(frozen=True)
class EncodedPiece:
    """A piece ready for Redis: its chunks' bytes and entries, its row count and largest result time."""

    chunks: list[bytes]
    entries: list[ChunkEntry]
    rows: int
    max_time: int

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks)


def encode_piece(table: pa.Table, batch_id: int, piece: int, emitted_at: int) -> EncodedPiece:
    """A result table's rows (one piece of batch `batch_id`, in row order) as chunks (see the module docstring)."""
    data = table.select([*stream_timestamps(table.schema), *window_columns(table.schema)])
    data = data.replace_schema_metadata(None)
    times = result_times(table)
    starts = chunk_starts(row_bytes(table))
    chunks, entries = [], []
    for seq, (start, stop) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, data.schema, options=_OPTIONS) as writer:
            writer.write_table(data.slice(start, stop - start))
        chunks.append(sink.getvalue().to_pybytes())
        span = times[start:stop]
        entries.append(
            ChunkEntry(
                batch_id, piece, seq, int(span.min()), int(span.max()), int(start), int(stop - start), emitted_at
            )
        )
    return EncodedPiece(chunks, entries, table.num_rows, int(times.max()) if table.num_rows else 0)


def chunk_starts(sizes: np.ndarray) -> list[int]:
    """Row positions where chunks start, then the row count: each chunk ends at the first row that brings it to
    `CHUNK_BYTES` or `CHUNK_ROWS` (so a chunk holds at most the bound plus one row)."""
    starts, start, n = [0], 0, len(sizes)
    ends = np.cumsum(sizes)
    while start < n:
        before = ends[start - 1] if start else 0
        reach = int(np.searchsorted(ends, before + CHUNK_BYTES, side="left")) + 1  # the row reaching the bound
        start = min(reach, start + CHUNK_ROWS, n)
        starts.append(start)
    return starts if n else [0]


def decode_chunk(data: bytes | memoryview, entry: ChunkEntry) -> pa.Table:
    """A chunk as a result table: its streams' columns, then `batch_id` and `emitted_at` from its entry, with the
    timestamps metadata readers go by (each stream's first field is its timestamp, as in every result schema)."""
    stored = ipc.open_stream(pa.py_buffer(data)).read_all()
    n = stored.num_rows
    timestamps = {field.name: field.type[0].name for field in stored.schema if pa.types.is_struct(field.type)}
    columns = [*stored.columns, pa.array(np.full(n, entry.batch, dtype=np.int64))]
    columns.append(pa.array(np.full(n, entry.emitted_at, dtype=np.int64)))
    fields = [*stored.schema, pa.field(BATCH_ID, pa.int64()), pa.field(EMITTED_AT, pa.int64())]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata={META_TIMESTAMPS: orjson.dumps(timestamps)}))
