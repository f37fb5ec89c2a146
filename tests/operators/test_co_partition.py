"""Which field of each stream splits a spec's join exactly: keys, else fields every task equates; none for count
windows, cross products, non-equi tasks or tasks that would need two fields of one stream."""

from __future__ import annotations

import pytest

from windjoin.operators.co_partition import co_partition
from windjoin.operators.spec import parse_spec

FIELDS = {"k": "int", "j": "int", "x": "float"}


def _spec(tasks: list[dict], window: dict | None = None, keys: dict | None = None) -> dict:
    streams = {s: {"fields": FIELDS, **({"key": keys[s]} if keys and s in keys else {})} for s in "ABC"}
    return {"window": window or {"kind": "time", "size_ms": 10}, "streams": streams, "tasks": tasks}


def _eq(left: str, right: str) -> dict:
    return {"op": "eq", "left": left, "right": right}


def _task(name: str, join: list[str], *on: dict) -> dict:
    return {"name": name, "join": join, "on": list(on)}


@pytest.mark.parametrize(
    ("tasks", "keys", "fields"),
    [
        ([_task("t", ["A", "B"], _eq("A.k", "B.j"))], None, {"A": "k", "B": "j"}),
        (
            [_task("t", ["A", "B"], _eq("A.x", "B.x"), _eq("A.k", "B.k")), _task("u", ["B", "C"], _eq("C.j", "B.k"))],
            None,
            {"A": "k", "B": "k", "C": "j"},
        ),
        ([_task("t", ["A", "B", "C"], _eq("A.k", "B.k"), _eq("C.j", "B.k"))], None, {"A": "k", "B": "k", "C": "j"}),
        ([_task("t", ["A", "B"], _eq("A.j", "B.j"), _eq("A.k", "B.k"))], {"A": "k", "B": "k"}, {"A": "k", "B": "k"}),
    ],
)
def test_fields_every_task_equates(tasks, keys, fields):
    assert co_partition(parse_spec(_spec(tasks, keys=keys))).fields == fields


@pytest.mark.parametrize(
    ("tasks", "window", "reason"),
    [
        ([_task("t", ["A", "B"], _eq("A.k", "B.k"))], {"kind": "count", "size": 4}, "count window"),
        ([_task("t", ["A", "B"])], None, "equated (eq) on no field"),
        ([_task("t", ["A", "B"], {"op": "band", "left": "A.x", "right": "B.x", "width": 1})], None, "no field"),
        ([_task("t", ["A", "B"], _eq("A.k", "B.k")), _task("u", ["A", "C"], _eq("A.j", "C.j"))], None, "every task"),
        ([_task("t", ["A", "B", "C"], _eq("A.k", "B.k"), _eq("B.j", "C.j"))], None, "every task"),
    ],
)
def test_no_exact_split(tasks, window, reason):
    split = co_partition(parse_spec(_spec(tasks, window)))
    assert split.fields is None and reason in split.reason
