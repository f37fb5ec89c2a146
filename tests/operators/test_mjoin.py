"""MJoin against the brute-force n-way oracle on random 3- and 4-way specs and event sequences."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.operators.run import run_join, run_mjoin
from tests.support.mjoin_cases import STREAMS, by_task, check_against_oracle, events
from windjoin.operators.join import WindowJoin
from windjoin.operators.mjoin import MJoin
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join, oracle_mjoin

NUMERIC = ["k", "x", "y", "v"]


def _field(draw, numeric: bool = False) -> str:
    return draw(st.sampled_from(NUMERIC if numeric else [*NUMERIC, "s"]))


@st.composite
def tasks(draw, name: str, n: int, same_attribute: bool):
    """A connected n-way task: eq predicates along a random spanning tree, plus random filters."""
    streams = draw(st.permutations(sorted(STREAMS)))[:n]
    on = []
    attribute = draw(st.sampled_from(["k", "x", "s"]))
    for i in range(1, n):
        parent = streams[draw(st.integers(0, i - 1))]
        if same_attribute:
            left_field = right_field = attribute
        else:
            left_field = draw(st.sampled_from(["k", "x", "y", "v"]))
            right_field = draw(st.sampled_from(["k", "x", "y", "v"]))
        pair = [f"{parent}.{left_field}", f"{streams[i]}.{right_field}"]
        if draw(st.booleans()):
            pair.reverse()
        on.append({"op": "eq", "left": pair[0], "right": pair[1]})
    for _ in range(draw(st.integers(0, 2))):  # filters between any two of the task's streams
        a, b = draw(st.permutations(streams))[:2]
        kind = draw(st.sampled_from(["eq", "ne", "order", "band", "outside", "ts"]))
        if kind == "ts":
            ts_a, ts_b = (STREAMS[s]["timestamp"] for s in (a, b))
            on.append({"op": draw(st.sampled_from(["lt", "ge"])), "left": f"{a}.{ts_a}", "right": f"{b}.{ts_b}"})
        elif kind in ("band", "outside"):
            width = draw(st.sampled_from([0, 1, 2, 0.5]))
            on.append(
                {"op": kind, "left": f"{a}.{_field(draw, True)}", "right": f"{b}.{_field(draw, True)}", "width": width}
            )
        elif kind == "order":
            op = draw(st.sampled_from(["lt", "le", "gt", "ge"]))
            on.append({"op": op, "left": f"{a}.{_field(draw, True)}", "right": f"{b}.{_field(draw, True)}"})
        else:
            field = _field(draw)
            on.append({"op": kind, "left": f"{a}.{field}", "right": f"{b}.{field}"})
    return {"name": name, "join": list(streams), "on": on}


@st.composite
def specs(draw, n_streams: int | None = None, same_attribute: bool | None = None):
    if draw(st.booleans()):
        window = {"kind": "time", "size_ms": draw(st.integers(1, 30))}
    else:
        window = {"kind": "count", "size": draw(st.integers(1, 6))}
    n_tasks = draw(st.integers(1, 2))
    task_list = []
    for i in range(n_tasks):
        n = n_streams or draw(st.sampled_from([3, 4]))
        same = draw(st.booleans()) if same_attribute is None else same_attribute
        task_list.append(draw(tasks(f"t{i}", n, same)))
    return {"window": window, "allowed_lateness_ms": draw(st.integers(0, 10)), "streams": STREAMS, "tasks": task_list}


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spec=specs(n_streams=3), evs=events(), chunk_size=st.integers(1, 50))
def test_three_way_matches_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@SETTINGS
@given(spec=specs(n_streams=4), evs=events(), chunk_size=st.integers(1, 50))
def test_four_way_matches_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@settings(max_examples=150, deadline=None)
@given(spec=specs(same_attribute=True), evs=events(), chunk_size=st.integers(1, 50))
def test_one_attribute_matches_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@settings(max_examples=150, deadline=None)
@given(spec=specs(same_attribute=False), evs=events(), chunk_size=st.integers(1, 50))
def test_different_attributes_match_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), evs=events(max_size=30, hot=True), chunk_size=st.integers(1, 30))
def test_one_hot_key_matches_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@settings(max_examples=100, deadline=None)
@given(spec=specs(), evs=events(), chunk_sizes=st.lists(st.integers(1, 50), min_size=1, max_size=3))
def test_results_and_their_order_do_not_depend_on_chunking(spec, evs, chunk_sizes):
    reference, _, _ = run_mjoin(spec, evs, 1)
    for chunk_size in [*chunk_sizes, 10_000]:
        got, _, _ = run_mjoin(spec, evs, chunk_size)
        for task in spec["tasks"]:  # each task's output in emission order (tasks interleave per chunk)
            assert by_task(got, task["name"]) == by_task(reference, task["name"])


@settings(max_examples=100, deadline=None)
@given(spec=specs(), evs=events(), data=st.data())
def test_probe_order_does_not_change_results(spec, evs, data):
    adaptive, _, _ = run_mjoin(spec, evs, 7)
    orders = {t["name"]: data.draw(st.permutations(t["join"])) for t in spec["tasks"]}
    fixed = check_against_oracle(spec, evs, 7, orders)
    for task in spec["tasks"]:
        assert by_task(fixed, task["name"]) == by_task(adaptive, task["name"])


@settings(max_examples=150, deadline=None)
@given(data=st.data(), chunk_size=st.integers(1, 40))
def test_two_stream_tasks_equal_window_join_and_both_oracles(data, chunk_size):
    """For 2 streams, MJoin, WindowJoin, the 2-way oracle and the n-way oracle all agree, order included."""
    spec = data.draw(specs(n_streams=2))
    evs = data.draw(events())
    pairs, pairs_late, _ = run_join(spec, evs, chunk_size)
    got = check_against_oracle(spec, evs, chunk_size)
    expected_pairs, expected_late = oracle_join(spec, evs)
    assert pairs_late == expected_late
    assert as_multiset(pairs) == as_multiset(oracle_mjoin(spec, evs)[0]) == as_multiset(expected_pairs)
    for task in spec["tasks"]:
        assert by_task(got, task["name"]) == by_task(pairs, task["name"])


def _event(stream: str, ts: int, k: int = 0, x: int = 0, y: int = 0) -> dict:
    return {"stream": stream, STREAMS[stream]["timestamp"]: ts, "k": k, "x": x, "y": y, "v": 0.0, "s": ""}


CHAIN = {
    "window": {"kind": "time", "size_ms": 10},
    "allowed_lateness_ms": 5,
    "streams": STREAMS,
    "tasks": [
        {
            "name": "chain",
            "join": ["A", "B", "C"],
            "on": [{"op": "eq", "left": "A.x", "right": "B.x"}, {"op": "eq", "left": "B.y", "right": "C.y"}],
        }
    ],
}


def test_window_is_max_minus_min_not_distance_to_last():
    """A at 0 and C at 10 fit with B at 5 (span 10); C at 11 does not, though each is within 10 of B."""
    evs = [_event("A", 0, x=1), _event("C", 10, y=2), _event("C", 11, y=2), _event("B", 5, x=1, y=2)]
    got, late, _ = run_mjoin({**CHAIN, "allowed_lateness_ms": 6}, evs, 2)
    assert late == []
    assert [(r[1]["ts"], r[2]["t"], r[3]["ts"]) for r in got] == [(0, 5, 10)]


def test_late_tuple_is_refused_and_tuple_within_lateness_joins():
    evs = [
        _event("A", 20, x=1),
        _event("C", 24, y=2),
        _event("B", 19, x=1, y=2),  # 5 behind the max (24): allowed, joins A and C
        _event("B", 18, x=1, y=2),  # 6 behind: late
    ]
    got, late, _ = run_mjoin(CHAIN, evs, 10)
    assert late == [3]
    assert [(r[1]["ts"], r[2]["t"], r[3]["ts"]) for r in got] == [(20, 19, 24)]


def test_count_window_needs_each_other_tuple_among_the_last_size():
    spec = {**CHAIN, "window": {"kind": "count", "size": 2}}
    evs = [_event("A", 0, x=1), _event("A", 0, x=5), _event("C", 0, y=2), _event("B", 0, x=1, y=2)]
    got, _, _ = run_mjoin(spec, evs, 3)
    assert len(got) == 1  # the first A is 2nd most recent of A when B arrives
    evs.insert(2, _event("A", 0, x=6))  # now the matching A is 3rd most recent
    got, _, _ = run_mjoin(spec, evs, 3)
    assert got == []


def test_cheapest_stream_is_probed_first():
    """C matches nothing: probing it first costs one lookup per A; probing B (all one key) first costs thousands."""
    spec = {
        "window": {"kind": "count", "size": 5000},
        "streams": STREAMS,
        "tasks": [
            {
                "name": "star",
                "join": ["A", "B", "C"],
                "on": [{"op": "eq", "left": "A.k", "right": "B.k"}, {"op": "eq", "left": "A.k", "right": "C.k"}],
            }
        ],
    }
    rng = random.Random(1)
    evs = [_event("B", 0, k=0) for _ in range(1000)] + [_event("C", 0, k=rng.randint(1, 10**6)) for _ in range(1000)]
    evs += [_event("A", 0, k=0) for _ in range(20)]
    _, _, adaptive = run_mjoin(spec, evs, 100)
    _, _, b_first = run_mjoin(spec, evs, 100, {"star": ["A", "B", "C"]})
    assert adaptive.probe_order("star", "A") == ["C", "B"]
    assert adaptive.counters["star"].outputs == b_first.counters["star"].outputs == 0
    assert adaptive.counters["star"].comparisons * 100 < b_first.counters["star"].comparisons


def test_windows_stay_bounded_on_a_long_run():
    rng = random.Random(3)
    evs, clock = [], 0
    for _ in range(3000):
        clock += rng.randint(0, 2)
        evs.append(
            _event(rng.choice("ABC"), max(0, clock - rng.randint(0, 4)), x=rng.randint(0, 9), y=rng.randint(0, 9))
        )
    got, late, join = run_mjoin(CHAIN, evs, 64)
    expected, expected_late = oracle_mjoin(CHAIN, evs)
    assert late == expected_late
    assert as_multiset(got) == as_multiset(expected) and len(expected) > 100
    assert all(len(store) < 300 for store in join.stores.values())


@pytest.mark.parametrize(
    ("orders", "message"),
    [
        ({"nope": ["A", "B", "C"]}, "probe_order['nope']: no such task"),
        ({"chain": ["A", "B"]}, "must list the task's streams"),
        ({"chain": ["A", "B", "B"]}, "must list the task's streams"),
    ],
)
def test_bad_probe_orders_are_refused(orders, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        MJoin(parse_spec(CHAIN), orders)


def test_window_join_refuses_tasks_of_more_than_two_streams():
    with pytest.raises(ValueError, match=r"\['chain'\] join more than two streams.*use MJoin"):
        WindowJoin(parse_spec(CHAIN))
