"""Which results meet a query's conditions, with Arrow compute: over a column, over a rows table
(`fields.rows_table`); and the result-time span the conditions leave."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.query.conditions import Condition
from windjoin.operators.query.fields import RESULT_TIME, field_column

_ARROW_OPS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def arrow_mask(column: pa.Array | pa.ChunkedArray, condition: Condition) -> np.ndarray:
    """The values of an Arrow column meeting a condition, with Arrow compute (nulls never meet one)."""
    kind = column.type
    if condition.op in ("is null", "is not null"):  # a stream's first field: null exactly where the stream is
        present = pc.is_valid(column)
        result = pc.invert(present) if condition.op == "is null" else present
    elif condition.op == "in":
        result = pc.is_in(column, value_set=pa.array(condition.value, type=kind))
    else:
        result = _ARROW_OPS[condition.op](column, pa.scalar(condition.value, type=kind))
    result = pc.fill_null(result, False)
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    return np.asarray(result.to_numpy(zero_copy_only=False), dtype=bool)


def select_table(table: pa.Table, conditions: Sequence[Condition]) -> pa.Table:
    """The rows of a rows table meeting every condition, with Arrow compute over its columns (nulls never meet
    one, as in `arrow_mask`)."""
    if not conditions or not table.num_rows:  # a feed that read nothing has no columns to select on
        return table
    keep = np.ones(table.num_rows, dtype=bool)
    for condition in conditions:
        keep &= arrow_mask(field_column(table, condition.field), condition)
    return table.filter(pa.array(keep))


def narrow_span(t_from: int, t_to: int, conditions: Sequence[Condition]) -> tuple[int, int]:
    """The span narrowed by conditions on result_time (it may come out empty: lower > upper)."""
    lower, upper = t_from, t_to
    for c in conditions:
        if c.field != RESULT_TIME:
            continue
        if c.op in (">=", "="):
            lower = max(lower, math.ceil(c.value))
        if c.op == ">":
            lower = max(lower, math.floor(c.value) + 1)
        if c.op in ("<=", "="):
            upper = min(upper, math.floor(c.value))
        if c.op == "<":
            upper = min(upper, math.ceil(c.value) - 1)
        if c.op == "in":
            lower, upper = max(lower, min(c.value)), min(upper, max(c.value))
    return lower, upper
