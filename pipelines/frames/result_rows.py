"""The rows `join_stream` returns: every task's results, and the refused input, in one documented schema.

A slot hands Spark flat columns without nulls (a null int would turn pandas' column into floats on its way to
Spark, and flat numpy columns convert fastest): `task`; per stream a `<stream>__present` flag and its struct's
children as `<stream>__<field>` (placeholders where absent); `window_start` / `window_end` for window kinds whose
tuples stand in windows of their own; `result_time`, `batch_id`, `emitted_at`; `dead_reason` / `dead_detail`.
`nested` then builds, inside Spark's JVM, the schema users get (`returned_ddl`):

    task string                 the task's name; null on a refused input row
    <stream> struct<ts, fields> one per stream of the spec, in spec order (the timestamp first, as in Parquet);
                                null where the row has no tuple of that stream (another task's stream, an outer,
                                semi or anti row's missing side)
    window_start, window_end    bigint, epoch ms (tumbling and hopping windows only)
    result_time                 bigint, epoch ms: the latest timestamp among the row's tuples
    batch_id, emitted_at        bigint: Spark's micro-batch, and when the slot emitted the row (epoch ms)
    dead_letter                 struct<stream, reason, detail>: a refused input row (late, or a value the spec's
                                types refuse), its tuple under its stream's column where it had one; null on results
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    WINDOW_COLUMNS,
    result_times,
    stream_struct,
)
from windjoin.operators.schema import LATE
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.adapter import field_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULT_TIME = "result_time"
DEAD_LETTER = "dead_letter"
_SPARK_TYPES = {pa.int64(): "bigint", pa.float64(): "double", pa.string(): "string", pa.bool_(): "boolean"}
_PLACEHOLDERS = {pa.int64(): 0, pa.float64(): 0.0, pa.string(): "", pa.bool_(): False}


def flat_schema(spec: JoinSpec) -> pa.Schema:
    """The slots' output columns (see the module docstring)."""
    fields = [pa.field("task", pa.string())]
    for stream in spec.streams:
        fields.append(pa.field(f"{stream}__present", pa.bool_()))
        fields += [pa.field(f"{stream}__{child.name}", child.type) for child in stream_struct(spec, stream)]
    if spec.window.copies:
        fields += [pa.field(name, pa.int64()) for name in WINDOW_COLUMNS]
    fields += [pa.field(name, pa.int64()) for name in (RESULT_TIME, BATCH_ID, EMITTED_AT)]
    fields += [pa.field("dead_stream", pa.string()), pa.field("dead_reason", pa.string())]
    fields.append(pa.field("dead_detail", pa.string()))
    return pa.schema(fields)


def flat_ddl(spec: JoinSpec) -> str:
    """`flat_schema` as Spark DDL, the stateful processor's output type."""
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in flat_schema(spec))


def flat_rows(
    spec: JoinSpec, tables: Mapping[str, pa.Table], dead: pa.Table, batch_id: int, emitted_at: int
) -> pa.Table:
    """One slot's results (per task, `result_table` layout) and refused rows (adapted columns with `reason` and
    `detail`) as `flat_schema` rows, no value null."""
    schema = flat_schema(spec)
    parts = [_results(spec, schema, task, table) for task, table in tables.items()]
    if dead.num_rows:
        parts.append(_refused(spec, schema, dead, batch_id, emitted_at))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _results(spec: JoinSpec, schema: pa.Schema, task: str, table: pa.Table) -> pa.Table:
    n = table.num_rows
    columns: dict[str, pa.Array] = {"task": pa.array([task] * n, pa.string())}
    for stream in spec.streams:
        if stream not in table.column_names:
            continue
        struct = table.column(stream).combine_chunks()
        columns[f"{stream}__present"] = struct.is_valid()
        for child in struct.type:
            columns[f"{stream}__{child.name}"] = pc.struct_field(struct, child.name)
    for name in (*WINDOW_COLUMNS, BATCH_ID, EMITTED_AT):
        if name in table.column_names:
            columns[name] = table.column(name).combine_chunks()
    columns[RESULT_TIME] = pa.array(result_times(table), pa.int64())
    return _filled(schema, columns, n)


def _refused(spec: JoinSpec, schema: pa.Schema, dead: pa.Table, batch_id: int, emitted_at: int) -> pa.Table:
    """Refused rows: a late tuple under its stream's column (its values are all valid); a row the spec's types
    refused carries its values in the detail only."""
    n = dead.num_rows
    stream = dead.column("stream").combine_chunks()
    late = pc.fill_null(pc.equal(dead.column("reason"), LATE), False).combine_chunks()
    columns: dict[str, pa.Array] = {
        "dead_stream": stream,
        "dead_reason": dead.column("reason").combine_chunks(),
        "dead_detail": pc.fill_null(dead.column("detail"), "").combine_chunks(),
        RESULT_TIME: pc.fill_null(dead.column("ts"), 0).combine_chunks(),
        BATCH_ID: pa.array(np.full(n, batch_id), pa.int64()),
        EMITTED_AT: pa.array(np.full(n, emitted_at), pa.int64()),
    }
    for name, s in spec.streams.items():
        mine = pc.and_(late, pc.fill_null(pc.equal(stream, name), False))
        columns[f"{name}__present"] = mine
        columns[f"{name}__{s.timestamp}"] = dead.column("ts").combine_chunks()
        for f in s.fields:
            columns[f"{name}__{f}"] = dead.column(field_column(name, f)).combine_chunks()
    return _filled(schema, columns, n)


def _filled(schema: pa.Schema, columns: Mapping[str, pa.Array], n: int) -> pa.Table:
    """`schema`'s columns from `columns`, each null (and missing) value its type's placeholder."""
    arrays = []
    for field in schema:
        column = columns.get(field.name)
        placeholder = pa.scalar(_PLACEHOLDERS[field.type], field.type)
        arrays.append(
            pa.repeat(placeholder, n) if column is None else pc.fill_null(column.cast(field.type), placeholder)
        )
    return pa.Table.from_arrays(arrays, schema=schema)


def nested(spec: JoinSpec, frame: DataFrame) -> DataFrame:
    """The slots' flat rows as the returned schema (module docstring): structs built in Spark's JVM."""
    from pyspark.sql import functions as F

    columns = [F.when(F.col("task") != "", F.col("task")).alias("task")]
    for stream in spec.streams:
        children = [F.col(f"`{stream}__{c.name}`").alias(c.name) for c in stream_struct(spec, stream)]
        columns.append(F.when(F.col(f"`{stream}__present`"), F.struct(*children)).alias(stream))
    if spec.window.copies:
        columns += [F.col(name) for name in WINDOW_COLUMNS]
    columns += [F.col(name) for name in (RESULT_TIME, BATCH_ID, EMITTED_AT)]
    dead = F.struct(
        F.col("dead_stream").alias("stream"), F.col("dead_reason").alias("reason"), F.col("dead_detail").alias("detail")
    )
    columns.append(F.when(F.col("dead_reason") != "", dead).alias(DEAD_LETTER))
    return frame.select(*columns)
