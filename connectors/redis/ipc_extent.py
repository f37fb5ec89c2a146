"""The rows and bytes an Arrow IPC record batch message decodes to, read from its metadata before its body is
decompressed, so that a reader can refuse a chunk that would expand past what its index entry allows.

pyarrow decodes a record batch whole (decompressing every buffer) and has no call that only reports its size; the
sizes are in the message's flatbuffer (`Message.fbs`: the RecordBatch's `length` and its `buffers`), and with body
compression each buffer starts with its uncompressed length (an int64; -1: stored uncompressed). This module reads
just those fields of the flatbuffer; anything it cannot read is `BadMessage`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow.ipc as ipc

_RECORD_BATCH = 3  # MessageHeader union type of a RecordBatch
_BUFFER = struct.Struct("<qq")  # Buffer: offset, length


class BadMessage(ValueError):
    """A message whose metadata does not describe a readable record batch."""


@dataclass(frozen=True)
class Extent:
    """What a record batch message decodes to: its rows and the bytes of its buffers once decompressed."""

    rows: int
    nbytes: int


def record_batch_extent(message: ipc.Message) -> Extent:
    """The rows and decoded bytes of a record batch message; BadMessage when it is not one or is malformed."""
    meta = memoryview(message.metadata)
    body = memoryview(message.body) if message.body is not None else memoryview(b"")
    try:
        root = _table(meta, _u32(meta, 0))
        if _scalar(meta, root, 1, "<B", 0) != _RECORD_BATCH:
            raise BadMessage("not a record batch")
        batch = _table(meta, _ref(meta, root, 2))
        rows = _scalar(meta, batch, 0, "<q", 0)
        compressed = _field(meta, batch, 3) != 0
        nbytes = 0
        for offset, length in _structs(meta, _ref(meta, batch, 2), _BUFFER):
            if offset < 0 or length < 0 or offset + length > len(body):
                raise BadMessage("a buffer outside the message body")
            nbytes += _decoded(body, offset, length) if compressed else length
    except (struct.error, IndexError):
        raise BadMessage("truncated metadata") from None
    if rows < 0:
        raise BadMessage(f"a negative row count ({rows})")
    return Extent(rows, nbytes)


def _decoded(body: memoryview, offset: int, length: int) -> int:
    """A compressed buffer's decoded size: its int64 prefix (-1: stored as is, after the prefix)."""
    if length == 0:
        return 0
    if length < 8:
        raise BadMessage("a compressed buffer without its length prefix")
    size = struct.unpack_from("<q", body, offset)[0]
    if size == -1:
        return length - 8
    if size < 0:
        raise BadMessage(f"a buffer of negative decoded size ({size})")
    return size


def _u32(buf: memoryview, pos: int) -> int:
    return struct.unpack_from("<I", buf, pos)[0]


def _table(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """A flatbuffer table: its position, its vtable's position and the vtable's size."""
    vtable = pos - struct.unpack_from("<i", buf, pos)[0]
    if not 0 <= vtable < len(buf):
        raise BadMessage("a table without its vtable")
    return pos, vtable, struct.unpack_from("<H", buf, vtable)[0]


def _field(buf: memoryview, table: tuple[int, int, int], index: int) -> int:
    """Field `index`'s position in the table, 0 when absent."""
    pos, vtable, size = table
    slot = 4 + 2 * index
    if slot + 2 > size:
        return 0
    offset = struct.unpack_from("<H", buf, vtable + slot)[0]
    return pos + offset if offset else 0


def _scalar(buf: memoryview, table: tuple[int, int, int], index: int, fmt: str, default: int) -> int:
    at = _field(buf, table, index)
    return struct.unpack_from(fmt, buf, at)[0] if at else default


def _ref(buf: memoryview, table: tuple[int, int, int], index: int) -> int:
    """The position an offset field points at; BadMessage when absent."""
    at = _field(buf, table, index)
    if not at:
        raise BadMessage(f"a required field ({index}) is missing")
    return at + _u32(buf, at)


def _structs(buf: memoryview, vector: int, shape: struct.Struct) -> list[tuple[int, ...]]:
    """The elements of a vector of structs."""
    count = _u32(buf, vector)
    if vector + 4 + count * shape.size > len(buf):
        raise BadMessage("a vector past the metadata's end")
    return [shape.unpack_from(buf, vector + 4 + i * shape.size) for i in range(count)]
