"""A batch's results put in SplitJoin's ordering levels (the spec's output_order), against Python's sorted()."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.result_table import order_results, table_from_records
from windjoin.operators.spec import parse_spec

SPEC = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 100},
        "streams": {
            "A": {"fields": {"i": "int"}},
            "B": {"fields": {"i": "int"}},
            "C": {"timestamp": "t", "fields": {}},
        },
        "tasks": [
            {"name": "ab", "join": ["A", "B"]},
            {
                "name": "abc",
                "join": ["A", "B", "C"],
                "on": [
                    {"op": "band", "left": "A.ts", "right": "B.ts", "width": 9},
                    {"op": "band", "left": "B.ts", "right": "C.t", "width": 9},
                ],
            },
        ],
    }
)
times = st.integers(0, 6)


def records(task: str, draws: list[tuple[int, int, int]]) -> list[dict]:
    out = []
    for i, (a, b, c) in enumerate(draws):
        row = {"task": task, "A": {"ts": a, "i": i}, "B": {"ts": b, "i": i}}
        if task == "abc":
            row["C"] = {"t": c}
        out.append(row)
    return out


@settings(max_examples=80, deadline=None)
@given(draws=st.lists(st.tuples(times, times, times), max_size=30), task=st.sampled_from(["ab", "abc"]))
def test_outer_orders_by_result_time_stably_and_strict_by_every_time(draws, task):
    table = table_from_records(SPEC, task, records(task, draws), 0, 0)
    stamps = [(a, b, c) if task == "abc" else (a, b) for a, b, c in draws]
    assert order_results(table, "none").equals(table)
    outer = [row["A"]["i"] for row in order_results(table, "outer").to_pylist()]
    assert outer == sorted(range(len(draws)), key=lambda i: max(stamps[i]))  # sorted() is stable
    strict = [row["A"]["i"] for row in order_results(table, "strict").to_pylist()]
    assert [sorted(stamps[i], reverse=True) for i in strict] == sorted(sorted(s, reverse=True) for s in stamps)
