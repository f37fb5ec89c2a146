"""Which results meet a query's conditions: result rows (row by row, or with numpy over a column), Arrow columns,
rows tables (`fields.rows_table`), and the result-time span the conditions leave."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.query.conditions import COMPARISONS, Condition
from windjoin.operators.query.fields import RESULT_TIME, field_column, field_value

_VECTOR_ROWS = 32  # below this many rows a selection is evaluated row by row
# Condition values numpy compares exactly as Python does, per column kind: int64, float64, bool.
_EXACT: dict[str, Callable[[Any], bool]] = {
    "i": lambda v: type(v) is int and -(2**63) <= v < 2**63,
    "f": lambda v: type(v) is float or (type(v) is int and abs(v) <= 2**53),
    "b": lambda v: type(v) is bool,
}
_ARROW_OPS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def matches(row: Mapping[str, Any], condition: Condition) -> bool:
    """Whether a result row meets a condition (Python comparison of the row's value with the condition's)."""
    value = field_value(row, condition.field)
    if condition.op == "in":
        return any(value == v for v in condition.value)
    return bool(COMPARISONS[condition.op](value, condition.value))


def select(rows: Sequence[dict[str, Any]], conditions: Sequence[Condition]) -> list[dict[str, Any]]:
    """The rows meeting every condition (exactly those `matches` keeps), in their order.

    A condition on a column of plain ints, floats or bools is evaluated with numpy over the column at once; any
    other (strings, nulls, values numpy would not compare exactly) row by row with `matches`, and only on the rows
    the conditions before it kept, as `all(matches(row, c) for c in conditions)` would."""
    if not conditions:
        return list(rows)
    if len(rows) < _VECTOR_ROWS:
        return [row for row in rows if all(matches(row, c) for c in conditions)]
    keep = np.ones(len(rows), dtype=bool)
    for condition in conditions:
        mask = _vector_mask(rows, condition)
        if mask is not None:
            keep &= mask
            continue
        for i in np.flatnonzero(keep).tolist():
            keep[i] = matches(rows[i], condition)
    return [rows[i] for i in np.flatnonzero(keep).tolist()]


def _vector_mask(rows: Sequence[dict[str, Any]], condition: Condition) -> np.ndarray | None:
    """`matches(row, condition)` for every row with numpy, or None where numpy would not compare exactly as Python
    does (a column that is not all int64, float64 or bool; a value not of the column's kind or beyond its exact
    range)."""
    values = [field_value(row, condition.field) for row in rows]
    column = np.array(values)
    kind = column.dtype.kind
    if kind not in _EXACT or column.ndim != 1:
        return None
    if kind == "f" and not all(type(v) is float for v in values):  # ints beyond 2**53 would round
        return None
    wanted = condition.value if condition.op == "in" else [condition.value]
    if not all(_EXACT[kind](v) for v in wanted):
        return None
    if condition.op == "in":
        return np.isin(column, np.array(wanted, dtype=column.dtype))
    return np.asarray(COMPARISONS[condition.op](column, condition.value), dtype=bool)


def arrow_mask(column: pa.Array | pa.ChunkedArray, condition: Condition) -> np.ndarray:
    """The values of an Arrow column meeting a condition, with Arrow compute (nulls never meet one)."""
    kind = column.type
    if condition.op == "in":
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
    if not conditions:
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
