"""Redis pieces that break their index entries, made the way a writer with the job's credentials could: a chunk of
the task's own schema holding far more rows than its entry says."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from tests.pipelines.proxy_helpers import Results
from windjoin.operators.result_table import result_schema, result_times, stream_timestamps, window_columns


def zeros(kind: pa.DataType, n: int) -> pa.Array:
    """`n` zero values (empty strings, false) without touching n values' worth of memory (calloc'd pages)."""
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([zeros(f.type, n) for f in kind], fields=list(kind))
    if pa.types.is_string(kind):
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")])
    if pa.types.is_boolean(kind):
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(np.zeros((n + 7) // 8, np.uint8))])
    return pa.array(np.zeros(n, dtype=kind.to_pandas_dtype()))


def crafted_chunk(results: Results, task: str, rows: int) -> bytes:
    """A chunk of the task's own schema holding `rows` rows, compressed as the sink compresses."""
    schema = result_schema(results.spec, task)
    fields = [schema.field(name) for name in [*stream_timestamps(schema), *window_columns(schema)]]
    table = pa.Table.from_arrays([zeros(f.type, rows) for f in fields], schema=pa.schema(fields))
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def damage(results: Results, batch: int, chunk: bytes) -> None:
    """Stage the next batch (10 rows a task), put `chunk` in place of task a's first chunk, then commit it."""
    prepared = results.prepare(10, t0=100 * batch)
    assert prepared.batch_id == batch
    redis_sink = results.sinks[0]
    redis_sink.stage(batch, 0, prepared.tables)
    results.redis.hset(f"{results.namespace}:{{a}}:piece:{batch}:0", "c0", chunk)
    tops = {task: int(result_times(table).max()) for task, table in prepared.tables.items()}
    redis_sink.commit(batch, {task: [0] for task in prepared.tables}, batch_max=tops)
