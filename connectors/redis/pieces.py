"""A piece of a batch's results as the Redis tier stores it: compressed Arrow IPC chunks of bounded size, each
described by an index entry (its result-time range and where its rows sit in the piece).

A piece (one slot's results of one batch, in row order) is cut into chunks of at most `CHUNK_ROWS` rows and about
`CHUNK_BYTES` of Arrow data (a chunk ends at the first row that reaches the bound; one row larger than the bound is
a chunk alone), so that every Redis call that moves a chunk moves a bounded number of bytes. A chunk holds only the
streams' struct columns (and the window columns of a kind that has them), without schema metadata, as one Arrow IPC
stream compressed with zstd; `batch_id` and `emitted_at` are the same for every row of a piece and live in the
entry. Row numbers are implicit: the chunk's first row is `offset` in its piece, so row `i` of the chunk is `piece
<< PIECE_ROW_BITS | offset + i`.

An entry is text, `batch:piece:seq:min:max:offset:rows:emitted_at:bytes` (a sorted-set member scored by `min`,
unique by `batch:piece:seq`), so readers find the chunks of a time span with one range read and no per-row work in
Redis; `bytes` is what the chunk's Arrow buffers take decoded (entries written before it have 8 fields).

Readers never trust a chunk further than its entry (`decode_chunk`): whoever may write the Redis keys could store a
few KiB of zstd that expand to gigabytes. A chunk is read a record batch at a time; each batch's rows and decoded
bytes are read from its metadata before its body is decompressed (`ipc_extent`), and the chunk is refused
(`ChunkDamaged`) as soon as they pass the entry's `rows` and `bytes` (`LEGACY_CHUNK_BYTES` for an entry without
them), when its schema is not the task's, when its buffers do not validate, or when it ends short of its entry. An
index member that is not an entry (`ChunkEntry.parse`) is `ChunkDamaged` too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from windjoin.connectors.redis.ipc_extent import BadMessage, Extent, record_batch_extent
from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    MAX_BATCH_ID,
    MAX_PIECE,
    META_TIMESTAMPS,
    PIECE_ROW_BITS,
    result_times,
    row_bytes,
    stream_timestamps,
    window_columns,
)

CHUNK_ROWS = 16_384
CHUNK_BYTES = 1 << 20  # Arrow bytes of a chunk before compression
# The most a chunk's entry may say it decodes to: one row far larger than any the codecs accept (max_message_bytes,
# 1 MiB by default) stays below it.
MAX_CHUNK_BYTES = 64 << 20
LEGACY_CHUNK_BYTES = 4 * CHUNK_BYTES  # the bound of an entry written before entries recorded their bytes
_OPTIONS = ipc.IpcWriteOptions(compression="zstd")
_INT64 = 2**63
_INTEGER = re.compile(r"-?[0-9]{1,19}")


class ChunkDamaged(ValueError):
    """A chunk, or an index member, that does not match what its entry says (a damaged or crafted Redis value)."""


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
    nbytes: int | None  # decoded Arrow bytes; None in entries written before they recorded it

    def member(self) -> str:
        """The entry as index text (see the module docstring)."""
        text = (
            f"{self.batch}:{self.piece}:{self.seq}:{self.min_time}:{self.max_time}:{self.offset}:{self.rows}:"
            f"{self.emitted_at}"
        )
        return text if self.nbytes is None else f"{text}:{self.nbytes}"

    @staticmethod
    def parse(member: bytes | str) -> ChunkEntry:
        """The entry of an index member; ChunkDamaged naming the member when it is not one a writer makes."""
        text = member.decode(errors="replace") if isinstance(member, bytes) else member
        parts = text.split(":")
        values = [int(p) for p in parts if _INTEGER.fullmatch(p)]
        if len(parts) not in (8, 9) or len(values) != len(parts):
            raise ChunkDamaged(f"index member {text[:80]!r} is not a chunk entry")
        entry = ChunkEntry(*values, *([None] if len(values) == 8 else []))
        why = entry._bad()
        if why:
            raise ChunkDamaged(f"index member {text[:80]!r}: {why}")
        return entry

    def _bad(self) -> str | None:
        """What makes the entry one no writer makes, or None."""
        if not (0 <= self.batch <= MAX_BATCH_ID and 0 <= self.piece <= MAX_PIECE and 0 <= self.seq < 2**PIECE_ROW_BITS):
            return "batch, piece or chunk number out of range"
        if not 1 <= self.rows <= CHUNK_ROWS or not 0 <= self.offset <= 2**PIECE_ROW_BITS - self.rows:
            return f"rows {self.rows} at {self.offset} (accepted: 1..{CHUNK_ROWS} rows within a piece)"
        if not -_INT64 <= self.min_time <= self.max_time < _INT64 or not -_INT64 <= self.emitted_at < _INT64:
            return "result times or emission time out of range"
        if self.nbytes is not None and not 0 <= self.nbytes <= MAX_CHUNK_BYTES:
            return f"{self.nbytes} bytes (accepted: 0..{MAX_CHUNK_BYTES})"
        return None

    @property
    def max_bytes(self) -> int:
        """The most the chunk may decode to."""
        return LEGACY_CHUNK_BYTES if self.nbytes is None else self.nbytes

    @property
    def max_stored(self) -> int:
        """The most bytes the compressed chunk may take in Redis: what it decodes to, zstd's worst case and the
        IPC stream's own metadata (each buffer's length prefix, the schema and batch messages)."""
        return self.max_bytes + self.max_bytes // 64 + (64 << 10)

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
    data = table.select(chunk_columns(table.schema)).replace_schema_metadata(None)
    times = result_times(table)
    starts = chunk_starts(row_bytes(table))
    chunks, entries = [], []
    for seq, (start, stop) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, data.schema, options=_OPTIONS) as writer:
            writer.write_table(data.slice(start, stop - start))
        chunk = sink.getvalue()
        chunks.append(chunk.to_pybytes())
        span = times[start:stop]
        nbytes = sum(e.nbytes for e in _extents(chunk))
        entries.append(
            ChunkEntry(
                batch_id,
                piece,
                seq,
                int(span.min()),
                int(span.max()),
                int(start),
                int(stop - start),
                emitted_at,
                nbytes,
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


def chunk_columns(schema: pa.Schema) -> list[str]:
    """The columns of a result schema that its chunks hold: the streams' structs, then the window columns."""
    return [*stream_timestamps(schema), *window_columns(schema)]


def chunk_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a result schema's chunks (without metadata): what a reader checks each chunk against."""
    return pa.schema([schema.field(name) for name in chunk_columns(schema)])


def _extents(chunk: pa.Buffer) -> Iterator[Extent]:
    """The extents of a chunk's record batches (the writer records their total in the entry)."""
    reader = ipc.MessageReader.open_stream(chunk)
    reader.read_next_message()  # the schema
    for message in reader:
        yield record_batch_extent(message)


def decode_chunk(data: bytes | memoryview, entry: ChunkEntry, schema: pa.Schema | None = None) -> pa.Table:
    """A chunk as a result table: its streams' columns, then `batch_id` and `emitted_at` from its entry, with the
    timestamps metadata readers go by (each stream's first field is its timestamp, as in every result schema).

    ChunkDamaged when it is not what its entry says (see the module docstring), before it decodes to more than
    the entry's rows and bytes; `schema`: the chunks' schema (`chunk_schema`; None: the chunk's own, for tools)."""
    if len(data) > entry.max_stored:
        raise ChunkDamaged(f"{len(data)} bytes stored, more than a chunk of {entry.max_bytes} bytes can take")
    try:
        stored = _bounded_read(pa.py_buffer(data), entry, schema)
    except (pa.ArrowException, BadMessage, StopIteration) as err:
        raise ChunkDamaged(f"not a readable Arrow IPC stream ({type(err).__name__}: {str(err)[:200]})") from None
    n = stored.num_rows
    timestamps = {field.name: field.type[0].name for field in stored.schema if pa.types.is_struct(field.type)}
    columns = [*stored.columns, pa.array(np.full(n, entry.batch, dtype=np.int64))]
    columns.append(pa.array(np.full(n, entry.emitted_at, dtype=np.int64)))
    fields = [*stored.schema, pa.field(BATCH_ID, pa.int64()), pa.field(EMITTED_AT, pa.int64())]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata={META_TIMESTAMPS: orjson.dumps(timestamps)}))


def _matches(stored: pa.Schema, expected: pa.Schema) -> bool:
    """Whether a chunk's schema holds the task's columns: the same names and types, a stream's fields in any order
    (the spec a reader loads may list them in another order than the writer's)."""
    if stored.names != expected.names:
        return False
    for have, want in zip(stored.types, expected.types, strict=True):
        if pa.types.is_struct(have) and pa.types.is_struct(want):
            if {f.name: f.type for f in have} != {f.name: f.type for f in want} or have.num_fields != want.num_fields:
                return False
        elif not have.equals(want):
            return False
    return True


def _bounded_read(data: pa.Buffer, entry: ChunkEntry, schema: pa.Schema | None) -> pa.Table:
    """The chunk's record batches, each checked against what is left of the entry's rows and bytes before it is
    decompressed, and validated after."""
    reader = ipc.MessageReader.open_stream(data)
    stored = ipc.read_schema(reader.read_next_message())
    if schema is not None and not _matches(stored, schema):
        raise ChunkDamaged(f"its schema is not the task's ({str(stored)[:200]!r})")
    batches, rows, nbytes = [], 0, 0
    for message in reader:
        extent = record_batch_extent(message)
        rows, nbytes = rows + extent.rows, nbytes + extent.nbytes
        if rows > entry.rows or nbytes > entry.max_bytes:
            raise ChunkDamaged(
                f"it holds more than its entry's {entry.rows} rows and {entry.max_bytes} bytes (at least {rows} rows, "
                f"{nbytes} bytes)"
            )
        batch = ipc.read_record_batch(message, stored)
        batch.validate(full=True)
        batches.append(batch)
    if rows != entry.rows or (entry.nbytes is not None and nbytes != entry.nbytes):
        raise ChunkDamaged(f"it holds {rows} rows and {nbytes} bytes, its entry {entry.rows} and {entry.max_bytes}")
    return pa.Table.from_batches(batches, stored)
