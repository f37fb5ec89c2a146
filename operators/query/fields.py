"""The names a result query selects and projects: `<stream>.<field>` (timestamps included), `result_time`,
`batch_id`, `emitted_at`; and a result row cut down to the projected ones.

A result row: `{<stream>: {field: value, ...}, ..., "batch_id": int, "row": int, "emitted_at": int,
"result_time": int}`, one object per joined stream in join order; a task over windows of their own (tumbling,
hopping) also has `window_start` and `window_end` after the streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.query.errors import BadQuery
from windjoin.operators.result_table import (
    ARROW_TYPES,
    BATCH_ID,
    EMITTED_AT,
    result_times,
    stream_timestamps,
    window_columns,
)

RESULT_TIME = "result_time"
ROW = "row"
_SPECIAL_FIELDS = {RESULT_TIME: "int", BATCH_ID: "int", EMITTED_AT: "int"}
Key = tuple[int, int, int]  # a row's position in one-time query order: (result_time, batch_id, row)


def result_fields(schema: pa.Schema) -> dict[str, str]:
    """The selectable and projectable names of a result schema's rows and their kinds ("int", "float", ...)."""
    kinds = {str(arrow): name for name, arrow in ARROW_TYPES.items()}
    fields = {}
    for stream in stream_timestamps(schema):
        for child in schema.field(stream).type:
            fields[f"{stream}.{child.name}"] = kinds[str(child.type)]
    fields |= dict.fromkeys(window_columns(schema), "int")
    return {**fields, **_SPECIAL_FIELDS}


def unknown_field(param: str, name: str, fields: Mapping[str, str]) -> BadQuery:
    """The error for a name that is not among `fields`, naming the parameter."""
    return BadQuery(f"{param}: unknown field {str(name)[:100]!r} (one of {list(fields)})")


def check_projection(names: Sequence[str] | None, fields: Mapping[str, str]) -> list[str] | None:
    """`names` without repeats when each is one of `fields` (None: whole rows); else BadQuery."""
    if names is None:
        return None
    if isinstance(names, str) or not names:
        raise BadQuery(f"fields: a non-empty list of field names (from {list(fields)})")
    for name in names:
        if name not in fields:
            raise unknown_field("fields", name, fields)
    return list(dict.fromkeys(names))


def field_column(table: pa.Table, field: str) -> pa.ChunkedArray:
    """A rows table's column of a selectable name (a stream's field: null where the stream's struct is null)."""
    stream, dot, name = field.partition(".")
    return pc.struct_field(table.column(stream), name) if dot else table.column(field)


def row_key(row: Mapping[str, Any]) -> Key:
    """A row's (result_time, batch_id, row) key."""
    return (row[RESULT_TIME], row[BATCH_ID], row[ROW])


def project(row: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
    """The row with only the named fields (in `fields` notation, nested by stream), or the row itself for None."""
    if names is None:
        return row
    out: dict[str, Any] = {}
    for name in names:
        stream, dot, field = name.partition(".")
        if dot and row[stream] is None:  # a row of an outer, semi or anti task without this stream
            out[stream] = None
        elif dot:
            out.setdefault(stream, {})[field] = row[stream][field]
        else:
            out[name] = row[name]
    return out


def project_table(table: pa.Table, names: list[str] | None) -> pa.Table:
    """A rows table with only the named fields, as `project` cuts each of its rows (the table itself for None)."""
    if names is None:
        return table
    tops = list(dict.fromkeys(name.partition(".")[0] for name in names))  # streams and plain names, in first use
    arrays = []
    for top in tops:
        column = table.column(top)
        inner = [field for stream, dot, field in (n.partition(".") for n in names) if dot and stream == top]
        if inner:
            children = [field_column(table, f"{top}.{field}").combine_chunks() for field in inner]
            arrays.append(pa.StructArray.from_arrays(children, names=inner, mask=_nulls(column)))
        else:
            arrays.append(column.combine_chunks())
    return pa.Table.from_arrays(arrays, names=tops)


def _nulls(column: pa.ChunkedArray) -> pa.Array | None:
    """Where a column is null (None when nowhere): a projected stream stays null where its struct was."""
    return pc.is_null(column).combine_chunks() if column.null_count else None


def table_rows(
    table: pa.Table, rows: Sequence[int] | np.ndarray, times: Sequence[int] | np.ndarray | None = None
) -> pa.Table:
    """The result rows of a result table (whose stream columns may hold only some of their fields) as a rows table
    (`rows_table`), numbered `rows`; `times`: their result times (None: computed from the table's timestamps)."""
    times = result_times(table) if times is None else times
    names = [*stream_timestamps(table.schema), *window_columns(table.schema)]
    return rows_table(
        {name: table.column(name).combine_chunks() for name in names},
        table.column(BATCH_ID).combine_chunks(),
        pa.array(np.asarray(rows, dtype=np.int64)),
        table.column(EMITTED_AT).combine_chunks(),
        pa.array(np.asarray(times, dtype=np.int64)),
    )


def rows_table(
    streams: Mapping[str, pa.Array], batch_ids: pa.Array, rows: pa.Array, emitted_at: pa.Array, times: pa.Array
) -> pa.Table:
    """Result rows as columns, one per key of a result row: a struct column per joined stream (`streams`, in join
    order, then the window columns of a task that has them), then batch_id, row, emitted_at and result_time. Readers
    keep rows so until they must be dicts (`as_rows`): the feed selects, projects and encodes them a column at a
    time."""
    return pa.Table.from_arrays(*_row_columns(streams, batch_ids, rows, emitted_at, times))


def result_rows(
    streams: Mapping[str, pa.Array], batch_ids: pa.Array, rows: pa.Array, emitted_at: pa.Array, times: pa.Array
) -> list[dict[str, Any]]:
    """`as_rows(rows_table(...))` without the table: one-time queries make a few rows from each of many pieces."""
    return pa.StructArray.from_arrays(*_row_columns(streams, batch_ids, rows, emitted_at, times)).to_pylist()


def _row_columns(
    streams: Mapping[str, pa.Array], batch_ids: pa.Array, rows: pa.Array, emitted_at: pa.Array, times: pa.Array
) -> tuple[list[pa.Array], list[str]]:
    """The columns of result rows and their names, in a result row's key order."""
    return [*streams.values(), batch_ids, rows, emitted_at, times], [*streams, BATCH_ID, ROW, EMITTED_AT, RESULT_TIME]


def as_rows(table: pa.Table) -> list[dict[str, Any]]:
    """A rows table's result rows as dicts, made by Arrow's C++ as one struct array (about 3x a dict built per row
    in Python; `Table.to_pylist` builds them in Python)."""
    if not table.num_rows:
        return []
    columns = [column.combine_chunks() for column in table.columns]
    return pa.StructArray.from_arrays(columns, names=table.column_names).to_pylist()


def row_position(table: pa.Table, i: int) -> tuple[int, int]:
    """The (batch_id, row) position of a rows table's row `i` (negative: from the end)."""
    return table.column(BATCH_ID)[i].as_py(), table.column(ROW)[i].as_py()


def concat_rows(parts: Sequence[pa.Table]) -> pa.Table:
    """Rows tables read one after another as one (no columns when there are none). Batches written under a
    changed spec may differ in a stream's fields: a field one of them lacks is null there, and a field whose type
    changed takes the wider one (an int read beside floats is a float)."""
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
