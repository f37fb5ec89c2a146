"""The Arrow layout of a task's result table, the unit the join job hands to its sinks per micro-batch.

A result table has one struct column per joined stream, named after the stream and in the task's `join` order,
holding that stream's timestamp field first and then its declared fields in spec order; then `batch_id` (int64) and
`emitted_at` (int64, epoch ms). Types: int -> int64, float -> float64, string -> string, bool -> bool, the timestamp
-> int64. A task over a window kind whose tuples stand in windows of their own (tumbling, hopping) has
`window_start` and `window_end` (int64, epoch ms) after the stream columns. No field value is ever null (sinks
refuse nulls); a whole stream's column is null in the rows an outer, semi or anti task emits with one side alone
(the schema's metadata names the task's type), never both. Fields are declared nullable, Arrow's default, so that a
table assembled from plain arrays has exactly this schema. The schema carries metadata naming the task and each
stream's timestamp field, so that sinks, which do not see the spec, can compute the *result time* of a result: the
latest (max) of its tuples' timestamps, one per joined stream (two for a pair, n for an n-way task; a row of one
side alone: that side's own).
Build tables with `table_from_columns` (or give `pa.Table.from_arrays` the schema of `result_schema`) so the
metadata comes along.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.spec import IDENTIFIER, JoinSpec, TaskSpec

ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}
_PLACEHOLDERS = {"int": 0, "float": 0.0, "string": "", "bool": False}  # values under a stream a row lacks
BATCH_ID = "batch_id"
EMITTED_AT = "emitted_at"
WINDOW_START, WINDOW_END = "window_start", "window_end"
WINDOW_COLUMNS = (WINDOW_START, WINDOW_END)
# Names a stream may not take in a result: the table's own columns, and the keys sinks add when reading back.
RESERVED_COLUMNS = ("task", BATCH_ID, EMITTED_AT, "result_time", *WINDOW_COLUMNS)
META_TASK = b"windjoin.task"
META_TIMESTAMPS = b"windjoin.timestamps"  # JSON object {stream: timestamp field}, in join order
META_TYPE = b"windjoin.type"  # the task's type (`TaskSpec.type`); tables written before it had none: inner
MAX_BATCH_ID = 2**53 - 1  # batch ids must survive a round trip through a double (Redis scores, Lua numbers)
# A result's `row` within its batch: its piece (the slot that wrote it) in the high bits, its position in the
# piece below, so slots number their rows without knowing each other's counts and (batch, row) stays unique.
PIECE_ROW_BITS = 32
MAX_PIECE = 2 ** (53 - PIECE_ROW_BITS) - 1  # rows stay below 2^53 (exact in doubles, Lua numbers, JSON readers)
FIXED_BYTES = 8  # what `row_bytes` counts for a value that is not a string (int64, float64, bool)

_IDENTIFIER = re.compile(IDENTIFIER)


def check_identifier(kind: str, name: str) -> str:
    """Return `name` if it is an identifier (what the spec accepts for names); else raise ValueError."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"{kind} {name!r} is not an identifier (accepted: {IDENTIFIER})")
    return name


def check_batch_id(batch_id: int) -> int:
    """Return `batch_id` if it is an int in 0..2^53-1; else raise ValueError."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, int | np.integer) or not 0 <= batch_id <= MAX_BATCH_ID:
        raise ValueError(f"batch id {batch_id!r} is not an int in 0..{MAX_BATCH_ID}")
    return int(batch_id)


def check_piece(piece: int) -> int:
    """Return `piece` (a slot's index, naming its part of a batch) if it is an int in 0..MAX_PIECE."""
    if isinstance(piece, bool) or not isinstance(piece, int | np.integer) or not 0 <= piece <= MAX_PIECE:
        raise ValueError(f"piece {piece!r} is not an int in 0..{MAX_PIECE} (a slot index)")
    return int(piece)


def piece_rows(piece: int, count: int) -> np.ndarray:
    """The `row` numbers of a piece's `count` results, in the piece's order (see PIECE_ROW_BITS)."""
    return (check_piece(piece) << PIECE_ROW_BITS) + np.arange(count, dtype=np.int64)


def _task(spec: JoinSpec, task_name: str) -> TaskSpec:
    for task in spec.tasks:
        if task.name == task_name:
            return task
    raise ValueError(f"task {task_name!r} is not in the spec (one of {[t.name for t in spec.tasks]})")


def result_schema(spec: JoinSpec, task_name: str) -> pa.Schema:
    """The Arrow schema of `task_name`'s result table (see the module docstring), with its metadata."""
    task = _task(spec, task_name)
    columns = []
    timestamps = {}
    for stream_name in task.join:
        if stream_name in RESERVED_COLUMNS:
            raise ValueError(f"stream {stream_name!r}: the name is reserved in results (not one of {RESERVED_COLUMNS})")
        columns.append(pa.field(stream_name, stream_struct(spec, stream_name)))
        timestamps[stream_name] = spec.streams[stream_name].timestamp
    if spec.window.copies:
        columns += [pa.field(name, pa.int64()) for name in WINDOW_COLUMNS]
    columns.append(pa.field(BATCH_ID, pa.int64()))
    columns.append(pa.field(EMITTED_AT, pa.int64()))
    metadata = {META_TASK: task.name.encode(), META_TIMESTAMPS: orjson.dumps(timestamps), META_TYPE: task.type.encode()}
    return pa.schema(columns, metadata=metadata)


def stream_struct(spec: JoinSpec, stream_name: str) -> pa.StructType:
    """A stream's column type in results: its timestamp (int64) first, then its declared fields in spec order."""
    stream = spec.streams[stream_name]
    children = [pa.field(stream.timestamp, pa.int64())]
    children += [pa.field(name, ARROW_TYPES[ftype]) for name, ftype in stream.fields.items()]
    return pa.struct(children)


def table_from_columns(
    spec: JoinSpec,
    task_name: str,
    sides: Mapping[str, Mapping[str, Sequence[Any] | np.ndarray]],
    batch_id: int,
    emitted_at: int,
    absent: Mapping[str, np.ndarray] | None = None,
    windows: tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray] | None = None,
) -> pa.Table:
    """A result table from columns per stream (`{stream: {field: values}}`, e.g. `operators.join.Pairs.sides`);
    `absent[stream]` marks the rows an outer, semi or anti task emits without that stream (its values there are
    placeholders); `windows`: each row's (window_start, window_end), for a schema that has them."""
    schema = result_schema(spec, task_name)
    absent = absent or {}
    check_batch_id(batch_id)
    n_rows = None
    arrays = []
    for field in schema:
        if field.name in (BATCH_ID, EMITTED_AT):
            continue
        if field.name in WINDOW_COLUMNS:
            if windows is None:
                raise ValueError(f"task {task_name!r}: its results need (window_start, window_end) columns")
            arrays.append(pa.array(np.asarray(windows[WINDOW_COLUMNS.index(field.name)], dtype=np.int64)))
            continue
        columns = sides.get(field.name)
        if columns is None:
            raise ValueError(f"task {task_name!r}: no columns for stream {field.name!r} (got {list(sides)})")
        children = []
        for child in field.type:
            if child.name not in columns:
                raise ValueError(f"task {task_name!r}: stream {field.name!r} has no column {child.name!r}")
            children.append(pa.array(columns[child.name], type=child.type))
            if n_rows is None:
                n_rows = len(children[-1])
            if len(children[-1]) != n_rows or children[-1].null_count:
                raise ValueError(f"task {task_name!r}: column {field.name}.{child.name} has nulls or a wrong length")
        mask = absent.get(field.name)
        arrays.append(
            pa.StructArray.from_arrays(
                children, fields=list(field.type), mask=None if mask is None else pa.array(mask, pa.bool_())
            )
        )
    n_rows = n_rows or 0
    arrays.append(pa.array(np.full(n_rows, batch_id, dtype=np.int64)))
    arrays.append(pa.array(np.full(n_rows, emitted_at, dtype=np.int64)))
    return pa.Table.from_arrays(arrays, schema=schema)


def table_from_records(
    spec: JoinSpec, task_name: str, records: Iterable[Mapping[str, Any]], batch_id: int, emitted_at: int
) -> pa.Table:
    """A result table from records shaped `{"task": name, <stream>: {field: value}, <stream>: {...}}`.

    For tests and small tools; every record must belong to `task_name`.
    """
    task = _task(spec, task_name)
    records = list(records)
    for i, record in enumerate(records):
        if record.get("task", task_name) != task_name:
            raise ValueError(f"record {i} belongs to task {record['task']!r}, not {task_name!r}")
    sides, absent = {}, {}
    for stream_name in task.join:
        stream = spec.streams[stream_name]
        names = [stream.timestamp, *stream.fields]
        missing = np.array([r.get(stream_name) is None for r in records], dtype=bool)
        if missing.any():
            if task.type == "inner":
                raise ValueError(f"task {task_name!r}: a record of an inner task lacks stream {stream_name!r}")
            absent[stream_name] = missing
        placeholder = {stream.timestamp: 0, **{f: _PLACEHOLDERS[t] for f, t in stream.fields.items()}}
        try:
            sides[stream_name] = {name: [(r[stream_name] or placeholder)[name] for r in records] for name in names}
        except (KeyError, TypeError) as err:
            raise ValueError(f"task {task_name!r}: a record lacks {stream_name}.{err}") from None
    windows = None
    if spec.window.copies:
        windows = tuple([int(r[name]) for r in records] for name in WINDOW_COLUMNS)
    return table_from_columns(spec, task_name, sides, batch_id, emitted_at, absent, windows)


def table_records(table: pa.Table) -> list[dict[str, Any]]:
    """The results of a result table as records `{"task": name, <stream>: {...}, ...}`, in row order."""
    task = table_task(table)
    streams = list(stream_timestamps(table.schema))
    names = [*streams, *window_columns(table.schema)]
    columns = {name: table.column(name).to_pylist() for name in names}
    return [{"task": task, **{name: columns[name][i] for name in names}} for i in range(table.num_rows)]


def window_columns(schema: pa.Schema) -> list[str]:
    """The window columns a result schema has (`window_start`, `window_end`; none for most window kinds)."""
    return [name for name in WINDOW_COLUMNS if name in schema.names]


def table_task(table: pa.Table) -> str:
    """The task a result table belongs to, from its schema metadata."""
    metadata = table.schema.metadata or {}
    if META_TASK not in metadata:
        raise ValueError("not a result table: no 'windjoin.task' schema metadata (build its schema with result_schema)")
    return metadata[META_TASK].decode()


def table_type(table: pa.Table) -> str:
    """The type of the task a result table belongs to (inner for tables written before types)."""
    return (table.schema.metadata or {}).get(META_TYPE, b"inner").decode()


def stream_timestamps(schema: pa.Schema) -> dict[str, str]:
    """`{stream: timestamp field}` in join order, from a result schema's metadata."""
    metadata = schema.metadata or {}
    if META_TIMESTAMPS not in metadata:
        raise ValueError(
            "not a result table: no 'windjoin.timestamps' schema metadata (build its schema with result_schema)"
        )
    timestamps: dict[str, str] = orjson.loads(metadata[META_TIMESTAMPS])
    return timestamps


def result_times(table: pa.Table) -> np.ndarray:
    """The result time of every result (int64 epoch ms): the max of its tuples' timestamps, over every stream."""
    columns = [pc.struct_field(table.column(s), ts) for s, ts in stream_timestamps(table.schema).items()]
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.max_element_wise(*columns).to_numpy().astype(np.int64, copy=False)


def row_bytes(table: pa.Table, leaves: list[str] | None = None) -> np.ndarray:
    """Bytes of each row's values (strings by their length, other values 8): what a chunk or a page is bounded by.
    `leaves`: the `stream.field` names counted (None: every stream field)."""
    sizes = np.zeros(table.num_rows, dtype=np.int64)
    for stream in stream_timestamps(table.schema):
        column = table.column(stream)
        for child in column.type:
            if leaves is not None and f"{stream}.{child.name}" not in leaves:
                continue
            if pa.types.is_string(child.type) or pa.types.is_large_string(child.type):
                lengths = pc.fill_null(pc.binary_length(pc.struct_field(column, child.name)), 0)  # a stream absent
                sizes += lengths.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            else:
                sizes += FIXED_BYTES
    sizes += FIXED_BYTES * sum(1 for name in window_columns(table.schema) if leaves is None or name in leaves)
    return sizes


def order_results(table: pa.Table, order: str) -> pa.Table:
    """A batch's results in SplitJoin's ordering levels: "none" (as produced), "outer" (by result time, the
    later tuple's; stable), "strict" (then by the earlier tuples' times, latest first)."""
    if order == "none" or table.num_rows < 2:
        return table
    if order not in ("outer", "strict"):
        raise ValueError(f"output_order must be 'none', 'outer' or 'strict', got {order!r}")
    low = np.iinfo(np.int64).min  # a side alone: the missing side's time sorts as the earliest
    columns = [
        pc.fill_null(pc.struct_field(table.column(s), ts), low) for s, ts in stream_timestamps(table.schema).items()
    ]
    times = np.sort(np.column_stack([c.to_numpy() for c in columns]), axis=1)[:, ::-1]  # latest first
    keys = times[:, :1] if order == "outer" else times
    return table.take(np.lexsort(keys.T[::-1]))


def check_result_table(table: pa.Table, batch_id: int, task: str | None = None) -> None:
    """Raise ValueError unless `table` is a result table of `batch_id` (and of `task`, when given)."""
    if not isinstance(table, pa.Table):
        raise ValueError(f"a result table is a pyarrow.Table, got {type(table).__name__}")
    found = table_task(table)
    if task is not None and found != task:
        raise ValueError(f"result table of task {found!r} handed over as task {task!r}")
    alone = table_type(table) != "inner"
    full = False  # some stream's tuple is in every row
    lacking: np.ndarray | None = None  # the rows without a tuple of any nullable stream seen so far
    for name in stream_timestamps(table.schema):
        if name not in table.column_names or not pa.types.is_struct(table.schema.field(name).type):
            raise ValueError(f"task {found!r}: result table has no struct column {name!r}")
        column = table.column(name)
        if not column.null_count:  # the common case, from the arrays' null counts alone
            nulls = [child.name for child in column.type if pc.struct_field(column, child.name).null_count]
            full = True
        elif not alone:
            raise ValueError(f"task {found!r}: column {name} holds nulls; an inner task's results never do")
        else:
            present = pc.is_valid(column)
            nulls = [
                child.name
                for child in column.type
                if pc.any(pc.and_(present, pc.is_null(pc.struct_field(column, child.name)))).as_py()
            ]
            missing = ~present.to_numpy(zero_copy_only=False)
            lacking = missing if lacking is None else lacking & missing
        if nulls:
            raise ValueError(f"task {found!r}: column {name}.{nulls[0]} holds nulls; results never do")
    if not full and lacking is not None and lacking.any():
        raise ValueError(f"task {found!r}: a result row has no stream's tuple")
    for name in (BATCH_ID, EMITTED_AT):
        if name not in table.column_names or table.schema.field(name).type != pa.int64():
            raise ValueError(f"task {found!r}: result table has no int64 column {name!r}")
        if table.column(name).null_count:
            raise ValueError(f"task {found!r}: column {name} holds nulls")
    if table.num_rows:
        span = pc.min_max(table.column(BATCH_ID))
        low, high = span["min"].as_py(), span["max"].as_py()
        if low != batch_id or high != batch_id:
            raise ValueError(f"task {found!r}: column batch_id holds {low}..{high}, not only batch {batch_id}")
