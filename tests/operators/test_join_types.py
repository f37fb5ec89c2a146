"""Outer, semi and anti tasks against the brute-force oracle: every type x window kind x bound shape, with ties,
lateness, empty windows and single-key skew; unpaired rows come exactly when their tuple can pair no more."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, check_against_oracle, events, specs
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.testing.feed import EventFeed
from windjoin.operators.testing.oracle import as_multiset, bounds, oracle_join, split_late

TYPES = ["inner", "left", "right", "full", "semi", "anti"]


@st.composite
def typed_specs(draw):
    spec = draw(specs())
    for task in spec["tasks"]:
        task["type"] = draw(st.sampled_from(TYPES))
    return spec


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=typed_specs(), evs=st.booleans().flatmap(lambda hot: events(hot_key=hot)), chunk_size=st.integers(1, 80))
def test_every_type_matches_the_oracle(spec, evs, chunk_size):
    """Keys from a few values, or all one key (single-key skew)."""
    check_against_oracle(spec, evs, chunk_size)


@pytest.mark.parametrize("kind", TYPES)
def test_one_stream_only_leaves_every_tuple_unpaired(kind):
    spec = {
        "window": {"kind": "time", "lower_ms": 0, "upper_ms": 5},
        "streams": STREAMS,
        "tasks": [{"name": "t", "join": ["R", "S"], "type": kind}],
    }
    evs = [{"stream": "R", "ts": i, "k": 0, "x": i, "y": 0.0, "z": "", "f": False} for i in range(5)]
    got = as_multiset(oracle_join(spec, evs)[0])
    assert sum(got.values()) == (5 if kind in ("left", "full", "anti") else 0)
    check_against_oracle(spec, evs, 2)


def _closed(spec: dict, task: dict, stream: str, event: dict, accepted: list[dict]) -> bool:
    """Whether `event` (accepted, of `stream`) can pair no more once `accepted` (in order) have arrived."""
    if spec["window"]["kind"] == "count":
        own = [e["n"] for e in accepted if e["stream"] == stream]
        return len(own) - own.index(event["n"]) > spec["window"]["size"]
    watermark = max(e["ts" if e["stream"] == "R" else "t"] for e in accepted) - spec["allowed_lateness_ms"]
    lower, upper = bounds(spec, task)
    ts = event["ts" if stream == "R" else "t"]
    return watermark > ts + upper if stream == task["join"][0] else watermark > ts - lower


def _alone(spec: dict, records: list[dict]) -> list[tuple]:
    rows = [(r["task"], *(r[s] for s in spec_task(spec, r["task"])["join"])) for r in records]
    return [r for r in rows if None in r]


def spec_task(spec: dict, name: str) -> dict:
    return next(t for t in spec["tasks"] if t["name"] == name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=typed_specs(), evs=events(), chunk_size=st.integers(1, 30))
def test_unpaired_rows_come_once_their_tuple_can_pair_no_more(spec, evs, chunk_size):
    """After each chunk, the rows of tuples that never paired are exactly the oracle's for the tuples that can pair
    no more by then: not earlier (a pair could still follow), not later (they would wait for nothing)."""
    streams = {name: {**s, "fields": {**s["fields"], "n": "int"}} for name, s in STREAMS.items()}
    spec = {**spec, "streams": streams}
    evs = [{**e, "n": i} for i, e in enumerate(evs)]  # every tuple unique
    waiting = [r for r in oracle_join(spec, evs)[0] if None in r and spec_task(spec, r[0])["type"] != "semi"]
    feed = EventFeed(parse_spec(spec), chunk_size)
    got: list[tuple] = []
    for start in range(0, len(evs), chunk_size):
        fed = None
        for position in range(start, min(start + chunk_size, len(evs))):
            fed = feed.add(evs[position], position) or fed
        fed = fed or feed.flush()
        got += [r for r in _alone(spec, fed.records() if fed else []) if spec_task(spec, r[0])["type"] != "semi"]
        accepted, _ = split_late(spec, evs[: start + chunk_size])
        here = {e["n"]: e for e in accepted}
        due = []
        for row in waiting:
            task = spec_task(spec, row[0])
            stream, tup = (task["join"][0], row[1]) if row[1] is not None else (task["join"][1], row[2])
            if tup["n"] in here and _closed(spec, task, stream, here[tup["n"]], accepted):
                due.append(row)
        assert as_multiset(got) == as_multiset(due)
    got += [r for r in _alone(spec, feed.finish().records()) if spec_task(spec, r[0])["type"] != "semi"]
    assert as_multiset(got) == as_multiset(waiting)


def test_a_complete_input_closes_every_window():
    """At the end of the input (join-file, join_events) every tuple alone is out, whatever the window."""
    spec = {
        "window": {"kind": "time", "size_ms": 1_000_000},
        "streams": STREAMS,
        "tasks": [
            {"name": "t", "join": ["R", "S"], "type": "full", "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}
        ],
    }
    evs = [
        {"stream": "R", "ts": 1, "k": 1, "x": 0, "y": 0.0, "z": "", "f": False},
        {"stream": "S", "t": 2, "k": 2, "a": 0, "b": 0.0, "c": "", "d": False},
    ]
    check_against_oracle(spec, evs, 10)
    expected = oracle_join(spec, evs)[0]
    assert [r[0] for r in expected] == ["t", "t"] and all(None in r for r in expected)


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"join": ["R", "S", "T"], "type": "left"}, "tasks[0].type: 'left' joins two streams"),
        ({"join": ["R", "S"], "type": "outer"}, "tasks[0].type"),
    ],
)
def test_types_are_checked(task, message):
    streams = {**STREAMS, "T": {"fields": {"k": "int"}}}
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}, {"op": "eq", "left": "S.k", "right": "T.k"}]
    spec = {"window": {"kind": "time", "size_ms": 5}, "streams": streams, "tasks": [{"name": "t", "on": on, **task}]}
    if len(task["join"]) == 2:
        spec["tasks"][0]["on"] = on[:1]
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert message in str(err.value)
