"""The feed's column-at-a-time path against the row-at-a-time one, on rows tables of every field kind (nulls, NaN,
infinities, escapes and non-ASCII included): `rows_json` writes the bytes orjson writes for the rows,
`select_table` keeps the rows a plain Python filter keeps (a null never meets a condition), and `project_table`
cuts them as `project` cuts each row."""

from __future__ import annotations

import operator
from typing import Any

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.query.conditions import Condition, check_conditions
from windjoin.operators.query.fields import as_rows, concat_rows, project, project_table, rows_table
from windjoin.operators.query.json_rows import rows_json
from windjoin.operators.query.selection import select_table
from windjoin.operators.result_table import ARROW_TYPES

PY_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt}
PY_OPS[">="] = operator.ge
VALUES: dict[str, Any] = {
    "int": st.one_of(st.integers(-3, 3), st.sampled_from([2**53 + 1, 2**63 - 1, -(2**63)])),
    "float": st.one_of(st.floats(), st.sampled_from([1.0, -0.0, 1e16, 1e-7, 123456789.125, 2.0**60])),
    "bool": st.booleans(),
    "string": st.one_of(st.sampled_from(["a", "b", "", 'q"\\', "\n\x00\x1f\x7f", "é\u2028"]), st.text(max_size=6)),
}
KINDS = list(VALUES)


@st.composite
def tables(draw: Any) -> pa.Table:
    """A rows table of two streams with fields of drawn kinds; any value and any stream may be null."""
    n = draw(st.integers(0, 20))
    kinds = {stream: draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3)) for stream in ("R", "S")}
    streams = {}
    for stream, fields in kinds.items():
        children = [
            pa.array(draw(st.lists(st.one_of(st.none(), VALUES[kind]), min_size=n, max_size=n)), ARROW_TYPES[kind])
            for kind in fields
        ]
        names = ["ts", *(f"f{i}" for i in range(1, len(fields)))]
        nulls = pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), pa.bool_())
        streams[stream] = pa.StructArray.from_arrays(children, names=names, mask=nulls)
    ints = [pa.array(draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)), pa.int64()) for _ in range(4)]
    return rows_table(streams, *ints)


def fields_of(table: pa.Table) -> dict[str, str]:
    kinds = {str(arrow): name for name, arrow in ARROW_TYPES.items()}
    return {
        f"{stream}.{child.name}": kinds[str(child.type)]
        for stream in ("R", "S")
        for child in table.schema.field(stream).type
    } | {name: "int" for name in ("batch_id", "emitted_at", "result_time")}


@st.composite
def conditions(draw: Any, table: pa.Table) -> list[Condition]:
    fields = fields_of(table)
    out = []
    for _ in range(draw(st.integers(0, 2))):
        field = draw(st.sampled_from(sorted(fields)))
        values = VALUES[fields[field]].filter(lambda v: v == v)  # NaN: no query can name it
        op = draw(st.sampled_from([*PY_OPS, "in"]))
        value = draw(st.lists(values, min_size=1, max_size=3)) if op == "in" else draw(values)
        out.append(Condition(field, op, value))
    return check_conditions(out, fields)


def meets(row: dict[str, Any], condition: Condition) -> bool:
    stream, dot, name = condition.field.partition(".")
    holder = row[stream] if dot else row
    value = None if holder is None else holder[name if dot else condition.field]
    if value is None:
        return False
    if condition.op == "in":
        return any(value == v for v in condition.value)
    return bool(PY_OPS[condition.op](value, condition.value))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_column_path_equals_the_row_path(data: Any) -> None:
    table = data.draw(tables())
    rows = as_rows(table)
    assert orjson.dumps(rows) == orjson.dumps(table.to_pylist())  # compared as JSON: NaN is not equal to itself
    assert rows_json(table) == orjson.dumps(rows)
    where = data.draw(conditions(table))
    selected = select_table(table, where)
    assert rows_json(selected) == orjson.dumps([row for row in rows if all(meets(row, c) for c in where)])
    names = data.draw(st.lists(st.sampled_from(sorted(fields_of(table))), min_size=1, unique=True))
    projected = project_table(selected, names)
    cut = [project(row, names) if all(row[s] is not None for s in ("R", "S")) else None for row in as_rows(selected)]
    for got, row, want in zip(as_rows(projected), as_rows(selected), cut, strict=True):
        if want is not None:
            assert orjson.dumps(got) == orjson.dumps(want)
        else:  # `project` cannot read a null stream's fields; the table keeps the stream null
            assert all(got[s] is None for s in got if s in ("R", "S") and row[s] is None)
    assert rows_json(projected) == orjson.dumps(as_rows(projected))


def test_reads_across_a_changed_spec_are_one_table() -> None:
    def read(r: list[dict[str, Any]]) -> pa.Table:
        return rows_table({"R": pa.array(r)}, *[pa.array([7] * len(r), pa.int64()) for _ in range(4)])

    before, added, widened = read([{"ts": 1, "k": 2}]), read([{"ts": 3, "k": 4, "z": "x"}]), read([{"ts": 5, "k": 6.5}])
    rows = as_rows(concat_rows([before, added, widened]))
    assert [row["R"] for row in rows] == [
        {"ts": 1, "k": 2.0, "z": None},
        {"ts": 3, "k": 4.0, "z": "x"},
        {"ts": 5, "k": 6.5, "z": None},
    ]
    assert as_rows(concat_rows([])) == []
