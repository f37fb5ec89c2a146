"""The names a result query selects and projects: `<stream>.<field>` (timestamps included), `result_time`,
`batch_id`, `emitted_at`; and a result row cut down to the projected ones.

A result row: `{<stream>: {field: value, ...}, ..., "batch_id": int, "row": int, "emitted_at": int,
"result_time": int}`, one object per joined stream in join order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from windjoin.operators.query.errors import BadQuery
from windjoin.operators.result_table import ARROW_TYPES, BATCH_ID, EMITTED_AT, result_times, stream_timestamps

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


def field_value(row: Mapping[str, Any], field: str) -> Any:
    """A row's value of a selectable name."""
    stream, dot, name = field.partition(".")
    return row[stream][name] if dot else row[field]


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
        if dot:
            out.setdefault(stream, {})[field] = row[stream][field]
        else:
            out[name] = row[name]
    return out


def table_rows(
    table: pa.Table, rows: Sequence[int] | np.ndarray, times: Sequence[int] | np.ndarray | None = None
) -> list[dict[str, Any]]:
    """Result rows `{<stream>: {...}, ..., "batch_id", "row", "emitted_at", "result_time"}` of a result table
    (whose stream columns may hold only some of their fields), numbered `rows`; `times`: their result times (None:
    computed from the table's timestamps)."""
    if not table.num_rows:
        return []
    times = result_times(table) if times is None else times
    return result_rows(
        {name: table.column(name).combine_chunks() for name in stream_timestamps(table.schema)},
        table.column(BATCH_ID).combine_chunks(),
        pa.array(np.asarray(rows, dtype=np.int64)),
        table.column(EMITTED_AT).combine_chunks(),
        pa.array(np.asarray(times, dtype=np.int64)),
    )


def result_rows(
    streams: Mapping[str, pa.Array], batch_ids: pa.Array, rows: pa.Array, emitted_at: pa.Array, times: pa.Array
) -> list[dict[str, Any]]:
    """Result rows from their columns (`streams`: one struct array per joined stream, in join order), made into
    dicts by Arrow's C++ as one struct array (about 3x a dict built per row in Python)."""
    names = [*streams, BATCH_ID, ROW, EMITTED_AT, RESULT_TIME]
    return pa.StructArray.from_arrays([*streams.values(), batch_ids, rows, emitted_at, times], names=names).to_pylist()
