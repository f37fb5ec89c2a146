"""The spec's n-way tasks: accepted when every stream is linked, errors naming the key otherwise."""

from __future__ import annotations

import copy

import pytest

from windjoin.operators.spec import SpecError, parse_spec

FIELDS = {"k": "int", "x": "int", "y": "float"}
NWAY = {
    "window": {"kind": "time", "size_ms": 1000},
    "streams": {s: {"fields": FIELDS} for s in "ABCD"},
    "tasks": [
        {
            "name": "chain",
            "join": ["A", "B", "C", "D"],
            "on": [
                {"op": "eq", "left": "A.x", "right": "B.x"},
                {"op": "eq", "left": "C.x", "right": "B.y"},
                {"op": "band", "left": "D.y", "right": "A.y", "width": 2},
            ],
        }
    ],
}


def test_n_way_tasks_are_accepted():
    spec = parse_spec(NWAY)
    assert spec.tasks[0].join == ["A", "B", "C", "D"]


def test_keyed_streams_linked_by_eq_on_keys_are_accepted():
    data = copy.deepcopy(NWAY)
    for s in "ABCD":
        data["streams"][s]["key"] = "k"
    data["tasks"][0]["on"] += [
        {"op": "eq", "left": "A.k", "right": "B.k"},
        {"op": "eq", "left": "D.k", "right": "C.k"},
        {"op": "eq", "left": "C.k", "right": "A.k"},
    ]
    assert parse_spec(data).tasks[0].join == ["A", "B", "C", "D"]


def _key_all(d: dict) -> None:
    for s in "ABCD":
        d["streams"][s]["key"] = "k"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["tasks"][0].update(join=["A", "B", "A"]), ["tasks[0].join", "itself", "['A']"]),
        (lambda d: d["tasks"][0].update(join=["A", "B", "C", "E"]), ["tasks[0].join", "'E'"]),
        (lambda d: d["tasks"][0]["on"].pop(), ["tasks[0].on", "separate groups", "[['A', 'B', 'C'], ['D']]"]),
        (lambda d: d["tasks"][0].update(on=[]), ["tasks[0].on", "separate groups"]),
        (
            lambda d: d["tasks"][0].update(join=["A", "B", "C"]),
            ["tasks[0].on[2].left", "'D' is not joined by this task", "['A', 'B', 'C']"],
        ),
        (lambda d: d["tasks"][0]["on"][1].update(left="C.nope"), ["tasks[0].on[1].left", "nope", "'k'"]),
        (lambda d: d["streams"]["A"].update(key="k"), ["tasks[0].join", "only 'A' has a key", "every joined stream"]),
        (
            lambda d: (d["streams"]["A"].update(key="k"), d["streams"]["C"].update(key="k")),
            ["tasks[0].join", "only ['A', 'C'] have a key"],
        ),
        (_key_all, ["tasks[0].on", "partitioned by key", "eq A.k = B.k"]),
    ],
)
def test_n_way_errors_name_the_key(mutate, expected):
    data = copy.deepcopy(NWAY)
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    for fragment in expected:
        assert fragment in str(err.value)


def test_keys_linked_only_in_part_are_refused():
    data = copy.deepcopy(NWAY)
    _key_all(data)
    data["tasks"][0]["on"] += [
        {"op": "eq", "left": "A.k", "right": "B.k"},
        {"op": "eq", "left": "D.k", "right": "C.k"},
        {"op": "band", "left": "C.k", "right": "A.k", "width": 0},  # not eq: does not co-partition
    ]
    with pytest.raises(SpecError, match=r"tasks\[0\]\.on: the streams are partitioned by key.*eq A\.k = C\.k"):
        parse_spec(data)
