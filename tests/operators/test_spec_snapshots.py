"""Spec keys of snapshots and tier retention: defaults, and errors that name the key and what is accepted."""

from __future__ import annotations

import copy

import pytest

from windjoin.operators.spec import SpecError, parse_spec

BASE = {
    "window": {"kind": "time", "size_ms": 1000},
    "streams": {
        "R": {"fields": {"k": "int", "x": "float", "c": "string", "b": "bool"}},
        "S": {"fields": {"k": "int"}},
    },
    "tasks": [{"name": "t", "join": ["R", "S"]}],
    "sinks": {"parquet": {"path": "out"}, "redis": {}},
}


def with_sinks(**sinks) -> dict:
    spec = copy.deepcopy(BASE)
    for name, keys in sinks.items():
        spec["sinks"][name].update(keys)
    return spec


def test_defaults() -> None:
    sinks = parse_spec(BASE).sinks
    assert sinks.parquet.retain_ms is None  # keep every snapshot
    assert sinks.parquet.snapshots.every_ms == 60_000 and sinks.parquet.snapshots.punctuation is None
    assert sinks.redis.feed_batches == 10_000
    both = parse_spec(with_sinks(parquet={"retain_ms": 5000}, redis={"retain_ms": 5000})).sinks
    assert both.parquet.retain_ms == both.redis.retain_ms == 5000


@pytest.mark.parametrize(("field", "value"), [("k", 7), ("x", 2), ("x", 2.5), ("c", "end"), ("b", False), ("ts", 0)])
def test_punctuation_of_each_type_is_accepted(field: str, value) -> None:
    spec = parse_spec(
        with_sinks(parquet={"snapshots": {"punctuation": {"stream": "R", "field": field, "value": value}}})
    )
    punct = spec.sinks.parquet.snapshots.punctuation
    assert (punct.stream, punct.field, punct.value) == ("R", field, value)


PUNCT = "sinks.parquet.snapshots.punctuation"


@pytest.mark.parametrize(
    ("sinks", "expected"),
    [
        ({"parquet": {"retain_ms": 0}}, ["sinks.parquet.retain_ms", "greater than 0", "0"]),
        ({"parquet": {"retain_ms": "1h"}}, ["sinks.parquet.retain_ms", "integer", "1h"]),
        ({"parquet": {"snapshots": {"every_ms": 0}}}, ["sinks.parquet.snapshots.every_ms", "greater than 0"]),
        ({"parquet": {"snapshots": {"hourly": True}}}, ["sinks.parquet.snapshots.hourly", "Extra inputs"]),
        ({"redis": {"feed_batches": -1}}, ["sinks.redis.feed_batches", "greater than 0", "-1"]),
        (
            {"parquet": {"retain_ms": 1000}, "redis": {"retain_ms": 5000}},
            ["sinks.parquet.retain_ms", "1000", "sinks.redis.retain_ms (5000)", "at least the Redis retention"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "Q", "field": "k", "value": 1}}}},
            [f"{PUNCT}.stream", "'Q'", "['R', 'S']"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "S", "field": "x", "value": 1}}}},
            [f"{PUNCT}.field", "'x'", "['ts', 'k']"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "k", "value": "end"}}}},
            [f"{PUNCT}.value", "'end'", "R.k (type int)", "an integer"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "k", "value": True}}}},
            [f"{PUNCT}.value", "True", "an integer"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "b", "value": 1}}}},
            [f"{PUNCT}.value", "R.b (type bool)", "true or false"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "x", "value": float("nan")}}}},
            [f"{PUNCT}.value", "a finite number"],
        ),
        (
            {"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "c", "value": ["a"]}}}},
            [f"{PUNCT}.value", "['a']", "a string"],
        ),
        ({"parquet": {"snapshots": {"punctuation": {"stream": "R", "field": "c"}}}}, [f"{PUNCT}.value", "required"]),
    ],
)
def test_errors_name_key_and_accepted(sinks: dict, expected: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(with_sinks(**sinks))
    message = str(err.value)
    for part in expected:
        assert part in message, (part, message)
