"""Window memory stays bounded, indexes cut comparisons, and tasks share one store per stream."""

from __future__ import annotations

import numpy as np

from tests.operators.run import run_join
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join


def _spec(window: dict, on: list[dict], tasks: int = 1) -> dict:
    return {
        "window": window,
        "streams": {"R": {"fields": {"k": "int", "x": "float"}}, "S": {"fields": {"k": "int", "a": "float"}}},
        "tasks": [{"name": f"t{i}", "join": ["R", "S"], "on": on} for i in range(tasks)],
    }


def _feed(join: WindowJoin, n_chunks: int, chunk: int, keys: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for c in range(n_chunks):
        ts = np.arange(c * chunk, (c + 1) * chunk, dtype=np.int64)
        is_r = rng.random(chunk) < 0.5
        order = np.arange(chunk)
        k = rng.integers(0, keys, chunk)
        x = rng.uniform(0, 1000, chunk)
        join.process(
            {
                "R": Arrivals({"ts": ts[is_r], "k": k[is_r], "x": x[is_r]}, order[is_r]),
                "S": Arrivals({"ts": ts[~is_r], "k": k[~is_r], "a": x[~is_r]}, order[~is_r]),
            }
        )


def test_count_window_memory_is_bounded():
    join = WindowJoin(parse_spec(_spec({"kind": "count", "size": 1000}, [{"op": "eq", "left": "R.k", "right": "S.k"}])))
    _feed(join, n_chunks=100, chunk=500, keys=50)
    for store in join.stores.values():
        assert store.count > 20_000
        assert len(store) <= 1000 + store.max_block_rows
        assert len(store.blocks) <= 12


def test_time_window_memory_is_bounded():
    join = WindowJoin(
        parse_spec(_spec({"kind": "time", "size_ms": 2000}, [{"op": "eq", "left": "R.k", "right": "S.k"}]))
    )
    _feed(join, n_chunks=100, chunk=500, keys=50)  # one tuple per ms
    for store in join.stores.values():
        assert len(store) <= (2000 + 2000 // 8 + 500) * 0.6  # about half the tuples of each ms per stream


def test_a_zero_size_window_holds_the_lateness_in_few_blocks():
    """size_ms 0 keeps only the tuples within the lateness, in blocks spanning an eighth of it (not one a ms)."""
    spec = _spec({"kind": "time", "size_ms": 0}, [{"op": "eq", "left": "R.k", "right": "S.k"}])
    join = WindowJoin(parse_spec({**spec, "allowed_lateness_ms": 2000}))
    _feed(join, n_chunks=2000, chunk=10, keys=50)  # one tuple per ms, small chunks: blocks must merge
    for store in join.stores.values():
        assert len(store) <= (2000 + 2000 // 8 + 10) * 0.6
        assert len(store.blocks) <= 40


def test_indexes_cut_comparisons():
    window = {"kind": "count", "size": 2000}
    eq = WindowJoin(parse_spec(_spec(window, [{"op": "eq", "left": "R.k", "right": "S.k"}])))
    band = WindowJoin(parse_spec(_spec(window, [{"op": "band", "left": "R.x", "right": "S.a", "width": 1.0}])))
    theta = WindowJoin(parse_spec(_spec(window, [{"op": "outside", "left": "R.x", "right": "S.a", "width": 998.0}])))
    for join in (eq, band, theta):
        _feed(join, n_chunks=20, chunk=1000, keys=500)
    eq_c, band_c, theta_c = (j.counters["t0"] for j in (eq, band, theta))
    assert eq_c.outputs > 0 and eq_c.efficiency > 0.5  # a hash lookup finds (nearly) only matches
    assert band_c.outputs > 0 and band_c.efficiency > 0.5  # a sorted range likewise
    assert theta_c.efficiency < 0.01  # the nested loop compares everything in the window
    assert theta_c.comparisons > 50 * eq_c.comparisons


def test_tasks_share_one_store_per_stream():
    on = [{"op": "eq", "left": "R.k", "right": "S.k"}]
    join = WindowJoin(parse_spec(_spec({"kind": "count", "size": 300}, on, tasks=4)))
    _feed(join, n_chunks=5, chunk=200, keys=10)
    assert sorted(join.stores) == ["R", "S"]
    outputs = {name: c.outputs for name, c in join.counters.items()}
    assert len(set(outputs.values())) == 1 and outputs["t0"] > 0


def test_preloaded_window_joins_like_earlier_arrivals():
    spec = _spec({"kind": "count", "size": 50}, [{"op": "band", "left": "R.x", "right": "S.a", "width": 30.0}])
    rng = np.random.default_rng(3)
    old = [{"stream": "S", "ts": i, "k": 0, "a": float(rng.uniform(0, 500))} for i in range(80)]
    new = [{"stream": "R", "ts": 100 + i, "k": 0, "x": float(rng.uniform(0, 500))} for i in range(40)]
    expected, _ = oracle_join(spec, old + new)
    join = WindowJoin(parse_spec(spec))
    join.preload("S", {"ts": np.arange(80), "k": np.zeros(80, np.int64), "a": np.array([e["a"] for e in old])})
    result = join.process(
        {
            "R": Arrivals(
                {"ts": np.arange(100, 140), "k": np.zeros(40, np.int64), "x": np.array([e["x"] for e in new])},
                np.arange(40),
            )
        }
    )
    pairs = result.pairs[0]
    got = [
        (
            "t0",
            {"ts": int(pairs.sides["R"]["ts"][i]), "k": 0, "x": float(pairs.sides["R"]["x"][i])},
            {"ts": int(pairs.sides["S"]["ts"][i]), "k": 0, "a": float(pairs.sides["S"]["a"][i])},
        )
        for i in range(len(pairs))
    ]
    assert as_multiset(got) == as_multiset(expected) and len(expected) > 0


def test_late_tuples_are_refused_and_reported():
    spec = _spec({"kind": "time", "size_ms": 10}, [{"op": "eq", "left": "R.k", "right": "S.k"}])
    spec["allowed_lateness_ms"] = 5
    events = [
        {"stream": "R", "ts": 100, "k": 1, "x": 0.0},
        {"stream": "S", "ts": 96, "k": 1, "a": 0.0},  # 4 ms behind: accepted, joins
        {"stream": "S", "ts": 94, "k": 1, "a": 0.0},  # 6 ms behind: late
        {"stream": "S", "ts": 120, "k": 1, "a": 0.0},
        {"stream": "R", "ts": 115, "k": 1, "x": 0.0},  # exactly at the lateness bound: accepted
    ]
    results, late, _ = run_join(spec, events, chunk_size=2)
    assert late == [2]
    assert [(left["ts"], right["ts"]) for _, left, right in results] == [(100, 96), (115, 120)]
