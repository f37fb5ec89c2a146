"""`select` (numpy over a chunk's columns where that is exact) against a plain row-by-row Python filter, on columns
of every kind the feed can hold: ints (also beyond int64 and 2**53), floats, bools, strings (NUL included), nulls,
and mixtures of them."""

from __future__ import annotations

import operator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.query.conditions import Condition
from windjoin.operators.query.selection import select

PY_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt}
PY_OPS[">="] = operator.ge

ints = st.one_of(st.integers(-5, 5), st.sampled_from([2**53, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, -(2**70)]))
floats = st.one_of(st.sampled_from([0.5, -1.0, 2.25, 0.0, -0.0, 9007199254740992.0]), st.floats(-10, 10))
strings = st.sampled_from(["a", "b", "a\x00", "", "é"])
columns = st.sampled_from(["int", "float", "bool", "string", "int|null", "int|float", "int|bool"])
KIND_VALUES: dict[str, Any] = {
    "int": ints,
    "float": floats,
    "bool": st.booleans(),
    "string": strings,
    "int|null": st.one_of(ints, st.none()),
    "int|float": st.one_of(ints, floats),
    "int|bool": st.one_of(ints, st.booleans()),
}
condition_values = st.one_of(ints, floats, st.booleans(), strings)


def oracle(rows: list[dict[str, Any]], conditions: list[Condition]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        ok = True
        for c in conditions:
            stream, dot, name = c.field.partition(".")
            value = row[stream][name] if dot else row[c.field]
            ok = any(value == v for v in c.value) if c.op == "in" else PY_OPS[c.op](value, c.value)
            if not ok:
                break
        if ok:
            out.append(row)
    return out


@st.composite
def cases(draw: Any) -> tuple[list[dict[str, Any]], list[Condition]]:
    kinds = {"R.a": draw(columns), "R.b": draw(columns), "batch_id": draw(columns)}
    n = draw(st.integers(0, 80))
    rows = []
    for i in range(n):
        rows.append(
            {
                "R": {"a": draw(KIND_VALUES[kinds["R.a"]]), "b": draw(KIND_VALUES[kinds["R.b"]])},
                "batch_id": draw(KIND_VALUES[kinds["batch_id"]]),
                "row": i,
            }
        )
    conditions = []
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(list(kinds)))
        op = draw(st.sampled_from([*PY_OPS, "in"]))
        if op == "in":
            value: Any = draw(st.lists(condition_values, min_size=1, max_size=4))
        else:
            value = draw(st.one_of(KIND_VALUES[kinds[field]], condition_values))
        conditions.append(Condition(field, op, value))
    return rows, conditions


@settings(max_examples=400, deadline=None)
@given(cases())
def test_select_keeps_exactly_the_rows_a_python_filter_keeps(case: tuple[list[dict[str, Any]], list[Condition]]):
    rows, conditions = case
    try:
        expected: Any = oracle(rows, conditions)
    except TypeError:
        expected = TypeError
    try:
        got: Any = select(rows, conditions)
    except TypeError:
        got = TypeError
    assert got == expected
    if got is not TypeError:
        assert all(a is b for a, b in zip(got, expected, strict=True))  # the rows themselves, in order


def test_select_of_a_large_int_chunk() -> None:
    rows = [{"R": {"k": k % 2000}, "batch_id": 1, "row": k} for k in range(10_000)]
    kept = select(rows, [Condition("R.k", "<", 1000), Condition("row", "in", list(range(0, 10_000, 3)))])
    assert [r["row"] for r in kept] == [k for k in range(0, 10_000, 3) if k % 2000 < 1000]


def test_select_compares_ints_and_floats_exactly() -> None:
    rows = [{"R": {"a": 2**53 + 1 if i % 2 else 0.5}, "batch_id": 0, "row": i} for i in range(64)]
    assert select(rows, [Condition("R.a", "=", 2**53)]) == []
    assert len(select(rows, [Condition("R.a", ">", 2**53)])) == 32
