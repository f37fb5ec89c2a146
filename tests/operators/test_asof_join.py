"""The as-of (temporal) join against the brute-force oracle (tests/support/asof_oracle.py): ties in time, versions
out of order within the lateness and beyond it, keys with no version, one hot key, max_age_ms, any chunking; its
state grows with keys, not with time; and the spec's refusals, each naming the key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, events
from tests.support.asof_oracle import joined_asof, oracle_asof
from windjoin.operators import asof
from windjoin.operators.join import WindowJoin
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.testing import EventFeed, join_events


@st.composite
def asof_specs(draw):
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        join = ["R", "S"] if draw(st.booleans()) else ["S", "R"]
        on = draw(
            st.sampled_from(
                [[], [("k", "k")], [("k", "k"), ("f", "d")], [("z", "c")], [("x", "a")], [("y", "b")], [("x", "b")]]
            )
        )
        preds = [{"op": "eq", "left": f"R.{r}", "right": f"S.{s}"} for r, s in on]
        task = {"name": f"t{i}", "join": join, "on": preds, "type": draw(st.sampled_from(["asof", "asof_left"]))}
        if draw(st.booleans()):
            task["max_age_ms"] = draw(st.integers(0, 20))
        tasks.append(task)
    return {
        "window": {"kind": "time", "size_ms": draw(st.integers(0, 40))},
        "allowed_lateness_ms": draw(st.integers(0, 15)),
        "streams": STREAMS,
        "tasks": tasks,
    }


def check(spec: dict, evs: list[dict], chunk_size: int) -> None:
    expected, expected_late = oracle_asof(spec, evs)
    joined = join_events(parse_spec(spec), evs, chunk_size)
    assert joined.late == expected_late
    assert joined_asof(spec, joined.results) == expected


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=asof_specs(), evs=st.booleans().flatmap(lambda hot: events(hot_key=hot)), chunk_size=st.integers(1, 80))
def test_as_of_tasks_match_the_oracle(spec, evs, chunk_size):
    check(spec, evs, chunk_size)


def _r(ts: int, k: int = 1, x: int = 0) -> dict:
    return {"stream": "R", "ts": ts, "k": k, "x": x, "y": 0.0, "z": "", "f": False}


def _s(t: int, k: int = 1, a: int = 0) -> dict:
    return {"stream": "S", "t": t, "k": k, "a": a, "b": 0.0, "c": "", "d": False}


SPEC = {
    "window": {"kind": "time", "size_ms": 1},
    "allowed_lateness_ms": 10,
    "streams": STREAMS,
    "tasks": [
        {"name": "t", "join": ["R", "S"], "type": "asof_left", "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}
    ],
}


def test_a_version_out_of_order_within_the_lateness_still_counts_and_ties_go_to_the_later_arrival():
    evs = [_s(5, a=1), _r(10), _s(8, a=2), _s(8, a=3), _s(30, a=4)]  # S at 8 arrive after R at 10 (within 10 ms)
    results = join_events(parse_spec(SPEC), evs, 1).results
    assert [(r["R"]["ts"], r["S"]["a"]) for r in results] == [(10, 3)]
    check(SPEC, evs, 1)


def test_a_left_tuple_waits_for_the_watermark_then_comes_out_alone_without_a_version():
    """R at 10 (key 2, no version): nothing after S at 15 (watermark 5), alone once S at 21 moves it to 11."""
    feed = EventFeed(parse_spec(SPEC), 1)
    out = [
        [(r["R"]["k"], r["S"]) for r in feed.add(e, i).records()] for i, e in enumerate([_r(10, k=2), _s(15), _s(21)])
    ]
    assert out == [[], [], [(2, None)]]
    assert feed.finish().records() == []


def test_state_grows_with_the_keys_not_with_time():
    """4x the events over the same keys: the versions kept stay one per key (and those within the lateness)."""
    spec = parse_spec(SPEC)
    held = []
    for n in (1_000, 4_000):
        join = WindowJoin(spec)
        evs = [(_s(i, k=i % 50) if i % 2 else _r(i, k=i % 50)) for i in range(n)]
        join_events(spec, evs, 256, join)
        held.append(len(join.asof["t"].versions))
    assert held[1] <= 1.2 * held[0] and held[0] <= 50 + 11


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"on": [{"op": "band", "left": "R.x", "right": "S.a", "width": 2}]}, "tasks[0].on[0].op: an as-of task"),
        ({"window": {"kind": "time", "size_ms": 5}}, "tasks[0].window: an as-of task is not bounded by a window"),
        ({"type": "inner", "max_age_ms": 5}, "tasks[0].max_age_ms: only used with type asof or asof_left"),
    ],
)
def test_the_spec_refuses_what_an_as_of_task_cannot_do(change, fragment):
    task = {**SPEC["tasks"][0], **change}
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, "tasks": [task]})
    assert fragment in str(err.value)


def test_an_as_of_task_needs_a_time_window():
    with pytest.raises(SpecError, match=r"tasks\[0\].type: 'asof_left' needs a time window"):
        parse_spec({**SPEC, "window": {"kind": "count", "size": 3}})


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(spec=asof_specs(), evs=events(), chunk_size=st.integers(1, 30))
def test_keys_whose_hashes_collide_are_told_apart_by_their_values(spec, evs, chunk_size, monkeypatch):
    """Every key hashed alike: each key's version is still found by comparing the values."""
    monkeypatch.setattr(asof, "_hash", lambda columns, n: np.zeros(n, dtype=np.uint64))
    check(spec, evs, chunk_size)
