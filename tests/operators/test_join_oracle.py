"""The operator against the brute-force oracle on random specs and event sequences."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.operators.join_cases import STREAMS, check_against_oracle, events, specs
from tests.operators.run import run_join
from windjoin.operators.testing.oracle import oracle_join

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spec=specs(), evs=events(), chunk_size=st.integers(1, 80))
def test_random_specs_match_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@SETTINGS
@given(spec=specs(), evs=events(hot_key=True), chunk_size=st.integers(1, 80))
def test_one_hot_key_matches_oracle(spec, evs, chunk_size):
    check_against_oracle(spec, evs, chunk_size)


@SETTINGS
@given(spec=specs(), evs=events(), chunk_size=st.integers(1, 80))
def test_a_zero_size_window_matches_oracle(spec, evs, chunk_size):
    """size_ms 0: only tuples with equal event times pair (ties across streams are common in `events`)."""
    check_against_oracle({**spec, "window": {"kind": "time", "size_ms": 0}}, evs, chunk_size)


def test_a_zero_size_window_pairs_exactly_the_equal_times():
    spec = {
        "window": {"kind": "time", "size_ms": 0},
        "allowed_lateness_ms": 5,
        "streams": STREAMS,
        "tasks": [{"name": "all", "join": ["R", "S"], "on": []}],
    }
    r = {"k": 0, "x": 0, "y": 0.0, "z": "", "f": True}
    s = {"k": 0, "a": 0, "b": 0.0, "c": "", "d": True}
    evs = [
        {"stream": "R", "ts": 10, **r},
        {"stream": "S", "t": 10, **s},  # pairs with the R at 10
        {"stream": "S", "t": 11, **s},
        {"stream": "S", "t": 9, **s},  # out of order, within the lateness: pairs with nothing
        {"stream": "R", "ts": 11, **r},  # pairs with the S at 11
        {"stream": "R", "ts": 10, **r},  # pairs with the S at 10
    ]
    got, late, _ = run_join(spec, evs, 2)
    assert not late
    assert sorted((left["ts"], right["t"]) for _, left, right in got) == [(10, 10), (10, 10), (11, 11)]
    check_against_oracle(spec, evs, 1)


@settings(max_examples=100, deadline=None)
@given(spec=specs(), evs=events())
def test_result_does_not_depend_on_chunking(spec, evs):
    one_by_one, _, _ = run_join(spec, evs, 1)
    all_at_once, _, _ = run_join(spec, evs, 10_000)
    for task in spec["tasks"]:  # each task's output stream, order included (tasks interleave per chunk)
        name = task["name"]
        assert [r for r in one_by_one if r[0] == name] == [r for r in all_at_once if r[0] == name]


@settings(max_examples=50, deadline=None)
@given(spec=specs(), evs=events())
def test_empty_stream(spec, evs):
    only_r = [e for e in evs if e["stream"] == "R"]
    assume(only_r)
    check_against_oracle(spec, only_r, 7)


@settings(max_examples=150, deadline=None)
@given(
    spec=specs(),
    values=st.lists(st.floats(-1e15, 1e15, allow_nan=False, allow_infinity=False), min_size=1, max_size=6),
    picks=st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 5)), max_size=60),
    chunk_size=st.integers(1, 30),
)
def test_wide_float_values_match_oracle(spec, values, picks, chunk_size):
    """Far-apart magnitudes and exact duplicates stress the float compound keys and widened ranges."""
    evs = []
    for i, (is_r, a, b) in enumerate(picks):
        y = values[a % len(values)]
        near = values[b % len(values)] + (b - 2) * 0.5
        if is_r:
            evs.append({"stream": "R", "ts": i, "k": a, "x": b, "y": y, "z": "", "f": True})
        else:
            evs.append({"stream": "S", "t": i, "k": b, "a": a, "b": near, "c": "", "d": False})
    check_against_oracle(spec, evs, chunk_size)


def _long_run(kind: str, seed: int) -> list[dict]:
    import random

    rng = random.Random(seed)
    out, clock = [], 0
    for _ in range(2500):
        clock += rng.randint(0, 2)
        ts = max(0, clock - rng.randint(0, 12))
        if rng.random() < 0.5:
            out.append(
                {
                    "stream": "R",
                    "ts": ts,
                    "k": rng.randint(0, 9),
                    "x": rng.randint(0, 60),
                    "y": rng.uniform(0, 60),
                    "z": rng.choice("abc"),
                    "f": rng.random() < 0.5,
                }
            )
        else:
            out.append(
                {
                    "stream": "S",
                    "t": ts,
                    "k": rng.randint(0, 9),
                    "a": rng.randint(0, 60),
                    "b": rng.uniform(0, 60),
                    "c": rng.choice("abc"),
                    "d": rng.random() < 0.5,
                }
            )
    return out


def test_long_runs_with_merged_and_expired_blocks():
    """Thousands of tuples: blocks merge up to their cap and expire whole while still holding stale tuples."""
    tasks = [
        {
            "name": "band2",
            "join": ["R", "S"],
            "on": [
                {"op": "band", "left": "R.x", "right": "S.a", "width": 3},
                {"op": "band", "left": "R.y", "right": "S.b", "width": 4.5},
            ],
        },
        {
            "name": "eq_lt",
            "join": ["S", "R"],
            "on": [{"op": "eq", "left": "R.k", "right": "S.k"}, {"op": "lt", "left": "S.b", "right": "R.y"}],
        },
        {
            "name": "theta",
            "join": ["R", "S"],
            "on": [
                {"op": "outside", "left": "R.y", "right": "S.b", "width": 20},
                {"op": "ne", "left": "R.z", "right": "S.c"},
            ],
        },
    ]
    for window in ({"kind": "time", "size_ms": 40}, {"kind": "time", "size_ms": 0}, {"kind": "count", "size": 150}):
        spec = {"window": window, "allowed_lateness_ms": 8, "streams": STREAMS, "tasks": tasks}
        evs = _long_run(window["kind"], seed=7)
        oracle = oracle_join(spec, evs)  # the same answer for every chunking
        for chunk_size in (1, 37, 1000):
            check_against_oracle(spec, evs, chunk_size, oracle)


def test_tile_and_chunk_edges_match_oracle(monkeypatch):
    """Tiny nested-loop tiles and candidate chunks put every tile and chunk boundary in play."""
    from windjoin.operators import kernel

    monkeypatch.setattr(kernel, "TILE_ROWS", 7)
    monkeypatch.setattr(kernel, "TILE_PROBES", 3)
    monkeypatch.setattr(kernel, "MAX_CANDIDATES", 5)
    tasks = [
        {"name": "theta", "join": ["R", "S"], "on": [{"op": "outside", "left": "R.y", "right": "S.b", "width": 9}]},
        {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {"name": "all", "join": ["S", "R"], "on": []},
    ]
    for window in ({"kind": "time", "size_ms": 15}, {"kind": "count", "size": 25}):
        spec = {"window": window, "allowed_lateness_ms": 6, "streams": STREAMS, "tasks": tasks}
        check_against_oracle(spec, _long_run(window["kind"], seed=3)[:600], chunk_size=45)


def test_nested_loop_equals_index_on_large_windows():
    """On 2^16-tuple windows (many tiles, merged blocks) the pairwise path and the indexes agree exactly."""
    import copy

    import numpy as np

    from windjoin.operators.batch import Arrivals
    from windjoin.operators.join import WindowJoin
    from windjoin.operators.spec import parse_spec
    from windjoin.operators.workloads.band import BAND_SPEC, band_columns

    spec = copy.deepcopy(BAND_SPEC)
    spec["window"] = {"kind": "count", "size": 1 << 16}
    outputs = []
    for use_indexes in (True, False):
        join = WindowJoin(parse_spec(spec), use_indexes=use_indexes)
        rng = np.random.default_rng(5)
        for stream in "RS":
            join.preload(stream, band_columns(stream, 1 << 16, rng))
        pairs = []
        for _ in range(3):
            order = np.arange(512)
            chunk = {
                "R": Arrivals(band_columns("R", 256, rng), order[::2]),
                "S": Arrivals(band_columns("S", 256, rng), order[1::2]),
            }
            p = join.process(chunk).pairs[0]
            pairs.extend(zip(p.later_seq.tolist(), p.earlier_seq.tolist(), strict=True))
        outputs.append(pairs)
    assert len(outputs[0]) > 100
    assert outputs[0] == outputs[1]
