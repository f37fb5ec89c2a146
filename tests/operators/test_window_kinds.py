"""Tumbling and hopping window joins against the brute-force oracle (tests/support/window_oracle.py): every join
type, ties in time, out-of-order arrivals within and beyond the lateness, empty windows, one hot key; and the
spec's refusals of what these kinds cannot do, each naming the key."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, events, predicates
from tests.support.window_oracle import joined_multiset, oracle_windowed, windows_of
from windjoin.operators.spec import SpecError, parse_spec
from windjoin.operators.testing import join_events

TYPES = ["inner", "left", "right", "full", "semi", "anti"]


@st.composite
def aligned_windows(draw):
    if draw(st.booleans()):
        size = draw(st.integers(1, 30))
        return {"kind": "tumbling", "size_ms": size, "offset_ms": draw(st.integers(0, size - 1))}
    hop = draw(st.integers(1, 12))
    return {
        "kind": "hopping",
        "size_ms": hop * draw(st.integers(1, 4)),
        "hop_ms": hop,
        "offset_ms": draw(st.integers(0, hop - 1)),
    }


@st.composite
def windowed_specs(draw):
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        join = ["R", "S"] if draw(st.booleans()) else ["S", "R"]
        tasks.append(
            {
                "name": f"t{i}",
                "join": join,
                "on": draw(st.lists(predicates(), max_size=2)),
                "type": draw(st.sampled_from(TYPES)),
            }
        )
    return {
        "window": draw(aligned_windows()),
        "allowed_lateness_ms": draw(st.integers(0, 15)),
        "streams": STREAMS,
        "tasks": tasks,
    }


def check(spec: dict, evs: list[dict], chunk_size: int) -> None:
    expected, expected_late = oracle_windowed(spec, evs)
    joined = join_events(parse_spec(spec), evs, chunk_size)
    assert joined.late == expected_late
    assert joined_multiset(spec, joined.results) == expected


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=windowed_specs(), evs=st.booleans().flatmap(lambda hot: events(hot_key=hot)), chunk_size=st.integers(1, 80))
def test_every_type_over_tumbling_and_hopping_windows_matches_the_oracle(spec, evs, chunk_size):
    check(spec, evs, chunk_size)


def test_a_pair_comes_once_per_window_holding_both_with_its_window():
    spec = {
        "window": {"kind": "hopping", "size_ms": 10, "hop_ms": 5},
        "streams": STREAMS,
        "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
    }
    r = {"stream": "R", "ts": 6, "k": 1, "x": 0, "y": 0.0, "z": "", "f": False}
    s = {"stream": "S", "t": 8, "k": 1, "a": 0, "b": 0.0, "c": "", "d": False}
    far = {"stream": "S", "t": 14, "k": 1, "a": 0, "b": 0.0, "c": "", "d": False}
    results = join_events(parse_spec(spec), [r, s, far]).results
    assert sorted((x["window_start"], x["window_end"], x["S"]["t"]) for x in results) == [
        (0, 10, 8),
        (5, 15, 8),
        (5, 15, 14),
    ]
    check(spec, [r, s, far], 1)


def test_windows_of_counts_size_over_hop_windows():
    assert windows_of({"kind": "hopping", "size_ms": 10, "hop_ms": 5}, 7) == [0, 5]
    assert windows_of({"kind": "tumbling", "size_ms": 10, "offset_ms": 3}, 2) == [-7]


@pytest.mark.parametrize(
    ("window", "fragment"),
    [
        ({"kind": "hopping", "size_ms": 10, "hop_ms": 3}, "size_ms: 10 is not a multiple of hop_ms (3)"),
        ({"kind": "hopping", "size_ms": 10, "hop_ms": 5, "offset_ms": 5}, "offset_ms: 5 is not below hop_ms"),
        ({"kind": "tumbling", "size_ms": 0}, "size_ms"),
        ({"kind": "tumbling", "size_ms": 10, "offset_ms": 10}, "offset_ms: 10 is not below size_ms"),
        ({"kind": "hopping", "size_ms": 1_000_000, "hop_ms": 1}, "accepted: size_ms / hop_ms <= 1024"),
    ],
)
def test_bad_windows_name_the_key_and_what_is_accepted(window, fragment):
    spec = {"window": window, "streams": STREAMS, "tasks": [{"name": "t", "join": ["R", "S"]}]}
    with pytest.raises(SpecError, match="window") as err:
        parse_spec(spec)
    assert fragment in str(err.value)


def test_a_task_cannot_bound_itself_or_join_three_streams_over_aligned_windows():
    streams = {**STREAMS, "T": {"timestamp": "ts", "fields": {"k": "int"}}}
    spec = {
        "window": {"kind": "tumbling", "size_ms": 10},
        "streams": streams,
        "tasks": [
            {"name": "own", "join": ["R", "S"], "window": {"kind": "time", "size_ms": 5}},
            {
                "name": "wide",
                "join": ["R", "S", "T"],
                "on": [{"op": "eq", "left": "R.k", "right": "S.k"}, {"op": "eq", "left": "S.k", "right": "T.k"}],
            },
        ],
    }
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert "tasks[0].window: a task's own bounds need the spec's window to be a time window" in str(err.value)
    assert "tasks[1].join: tasks of three or more streams need a time or count window (got kind tumbling)" in str(
        err.value
    )


@pytest.mark.parametrize("kind", ["left", "anti", "full"])
def test_a_row_alone_waits_until_the_watermark_reaches_its_windows_end(kind):
    """R at 3 stands in [0, 4); S at 3 arrives after it (not late: the watermark is 3), so R is not alone there."""
    spec = {
        "window": {"kind": "hopping", "size_ms": 4, "hop_ms": 1},
        "streams": STREAMS,
        "tasks": [{"name": "t", "join": ["R", "S"], "type": kind}],
    }
    r = {"stream": "R", "ts": 3, "k": 1, "x": 0, "y": 0.0, "z": "", "f": False}
    s = {"stream": "S", "t": 3, "k": 1, "a": 0, "b": 0.0, "c": "", "d": False}
    check(spec, [r, s], 1)
