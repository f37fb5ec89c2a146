"""The layout of a slot's stored tuples (state segments, moved groups, pushed generations) and its conversions.

A stored tuple keeps its partition, stream, event time and every stream's declared fields (Arrow IPC in state);
the operator takes per-stream numpy columns. A mini-group is not stored: it is recomputed from the key column
(moves are rare; storing the hash would cost 8 bytes per tuple in every segment written).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import key_hash, mini_bits
from windjoin.operators.result_table import ARROW_TYPES
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.adapter import field_column, key_column


def segment_schema(spec: JoinSpec) -> pa.Schema:
    """The columns a state segment (and a moved group) keeps of each tuple."""
    fields = [("part", pa.int32()), ("stream", pa.string()), ("ts", pa.int64())]
    for name, s in spec.streams.items():
        fields += [(field_column(name, f), ARROW_TYPES[t]) for f, t in s.fields.items()]
    return pa.schema(fields)


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """An IPC stream's table, its buffers pointing into `data` (no copy)."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def operator_columns(spec: JoinSpec, rows: pa.Table, stream: str) -> dict[str, np.ndarray]:
    """A stream's rows as the operator's columns: its timestamp and declared fields, typed."""
    s = spec.streams[stream]
    columns = {s.timestamp: _numpy(rows.column("ts"), np.int64)}
    for name, ftype in s.fields.items():
        dtype = {"int": np.int64, "float": np.float64, "bool": np.bool_, "string": object}[ftype]
        columns[name] = _numpy(rows.column(field_column(stream, name)), dtype)
    return columns


def _numpy(column: pa.ChunkedArray | pa.Array, dtype: Any) -> np.ndarray:
    values = column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False)
    return values if values.dtype == dtype else values.astype(dtype)


def by_stream(rows: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """Stored-layout rows split by stream (in name order), each keeping its order."""
    streams = rows.column("stream")
    for name in sorted(pc.unique(streams).to_pylist()):
        yield name, rows.filter(pc.equal(streams, name))


def preload(spec: JoinSpec, join: WindowJoin, rows: pa.Table) -> None:
    """Put stored rows (of one partition, in arrival order) into its window without joining them, numbered in
    that order across streams (a count window's recall of outer, semi and anti flags reads it)."""
    streams = rows.column("stream")
    join.preload_arrivals(
        {
            stream: Arrivals(operator_columns(spec, rows_s, stream), np.flatnonzero(pc.equal(streams, stream)))
            for stream, rows_s in by_stream(rows)
        }
    )


def generation(spec: JoinSpec, table: pa.Table) -> dict[str, dict[str, np.ndarray]]:
    """Stored rows as the spill clean-up's generation: per stream, the operator's columns."""
    return {stream: operator_columns(spec, rows_s, stream) for stream, rows_s in by_stream(table)}


def stored_mini_bits(spec: JoinSpec, table: pa.Table) -> np.ndarray:
    """The mini-group bits of each stored (or adapted) row, recomputed from its key exactly as the adapter
    routed it."""
    bits = np.zeros(table.num_rows, dtype=np.uint64)
    streams = table.column("stream").to_numpy()
    for stream in np.unique(streams):
        rows = streams == stream
        # taken before converting: the column is null on other streams' rows, and a nullable column
        # converts to another dtype (bool to object), which hashes differently
        keys = table.column(key_column(spec, stream)).filter(pa.array(rows)).to_numpy()
        bits[rows] = mini_bits(key_hash(keys), spec.partitions)
    return bits
