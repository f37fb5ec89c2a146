"""Blocks spanning far more than the window: the index ordered by the window column hands a probe (nearly) only
its window's rows, and results still equal the brute-force oracle."""

from __future__ import annotations

import numpy as np

from tests.operators.run import run_join
from windjoin.operators.index import IndexPlan, WindowOrder, choose_plan
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.spec import PredicateSpec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.operators.window import TS

STREAMS = {"R": {"fields": {"k": "int", "x": "float"}}, "S": {"fields": {"k": "int", "a": "float"}}}
ROWS = 1500


def _spec(window: dict, on: list[dict]) -> dict:
    return {
        "window": window,
        "allowed_lateness_ms": 0,
        "streams": STREAMS,
        "tasks": [{"name": "t", "join": ["R", "S"], "on": on}],
    }


def _events(keys: int, span_ms: int, seed: int = 0) -> list[dict]:
    """ROWS events in event-time order over `span_ms`, R and S at random, `keys` hot keys."""
    rng = np.random.default_rng(seed)
    out = []
    for ts in np.sort(rng.integers(0, span_ms, ROWS)).tolist():
        k, v = int(rng.integers(0, keys)), float(rng.integers(0, 100))
        out.append(
            {"stream": "R", "ts": ts, "k": k, "x": v}
            if rng.random() < 0.5
            else {"stream": "S", "ts": ts, "k": k, "a": v}
        )
    return out


def _check(spec: dict, evs: list[dict], chunk_size: int) -> tuple[int, int]:
    """Results equal the oracle's, in emission order; (pairs, comparisons)."""
    expected, _ = oracle_join(spec, evs)
    got, _, join = run_join(spec, evs, chunk_size)
    assert got == expected
    assert as_multiset(got) == as_multiset(expected)
    counters = join.counters["t"]
    assert counters.outputs == len(expected) > 0
    return counters.outputs, counters.comparisons


EQ = [{"op": "eq", "left": "R.k", "right": "S.k"}]


def test_hot_keys_in_a_wide_block_compare_about_their_pairs():
    """One chunk (one block) spans 3 s, the window is 5 ms, 3 hot keys: a plan grouped by key alone would
    compare every same-key pair (~ROWS^2 / 6); ordered by time within the key, a probe sees its window."""
    pairs, comparisons = _check(_spec({"kind": "time", "size_ms": 5}, EQ), _events(keys=3, span_ms=3000), ROWS)
    # the same-chunk block also holds the probe's later arrivals inside its window: about twice the pairs
    assert comparisons <= 3 * pairs + ROWS


def test_hot_keys_across_chunks_compare_about_their_pairs():
    pairs, comparisons = _check(_spec({"kind": "time", "size_ms": 20}, EQ), _events(keys=2, span_ms=4000), 500)
    assert comparisons <= 3 * pairs + ROWS


def test_a_count_window_in_a_wide_block_compares_about_its_pairs():
    """A 6-tuple count window against 1500-tuple chunks: ordered by arrival number within the key."""
    pairs, comparisons = _check(_spec({"kind": "count", "size": 6}, EQ), _events(keys=2, span_ms=3000), ROWS)
    assert comparisons <= 2 * pairs + ROWS


def test_a_window_cross_join_is_a_range_search():
    """No indexable predicate (`ne` and `outside` scan): a window 1/300 of the block is searched by time alone."""
    on = [{"op": "outside", "left": "R.x", "right": "S.a", "width": 10.0}, {"op": "ne", "left": "R.k", "right": "S.k"}]
    pairs, comparisons = _check(_spec({"kind": "time", "size_ms": 5}, on), _events(keys=3, span_ms=3000), ROWS)
    assert comparisons <= 4 * pairs + ROWS
    assert comparisons < ROWS * ROWS / 100  # the nested loop's would be ~ROWS^2 / 4


def test_a_zero_size_window_in_a_wide_block_pairs_equal_times():
    pairs, comparisons = _check(_spec({"kind": "time", "size_ms": 0}, EQ), _events(keys=2, span_ms=300), ROWS)
    assert comparisons <= 3 * pairs + ROWS


def test_a_second_predicate_and_the_window_share_the_block():
    """Key + band: the band orders the group when it cuts more than the window, else the window does; both exact."""
    on = [*EQ, {"op": "band", "left": "R.x", "right": "S.a", "width": 1.0}]
    for window_ms in (3, 3000):
        _check(_spec({"kind": "time", "size_ms": window_ms}, on), _events(keys=3, span_ms=3000), 400)


def _pred(op: str, left: str, right: str, width: float | None = None) -> ProbePredicate:
    return ProbePredicate.orient(PredicateSpec(op=op, left=left, right=right, width=width), "S")


def test_the_window_fraction_decides_the_plan():
    eq, band = _pred("eq", "R.k", "S.k"), _pred("band", "R.x", "S.a", 1.0)
    rng = np.random.default_rng(0)
    columns = {"k": rng.integers(0, 3, 1000), "x": rng.uniform(0, 100, 1000)}
    narrow, wide = WindowOrder(TS, 10.0, 3000), WindowOrder(TS, 6000.0, 3000)
    assert choose_plan([eq], columns) == IndexPlan(eq, None)
    assert choose_plan([eq], columns, narrow) == IndexPlan(eq, None, TS)
    narrowed = choose_plan([eq, band], columns, narrow)  # 1/300 of the block beats the band's 1/50 as the order
    assert (narrowed.order, narrowed.window) == (None, TS)
    assert choose_plan([eq, band], columns, wide).order == band  # the window covers the block: the band orders
    assert IndexPlan(eq, None).key != IndexPlan(eq, None, TS).key  # tasks share only the index they probe
    ne = _pred("ne", "R.k", "S.k")
    assert choose_plan([ne], columns, narrow) == IndexPlan(None, None, TS)
    assert choose_plan([ne], columns, WindowOrder(TS, 1000.0, 3000)) is None  # a third of the block: scan it
    assert choose_plan([eq], columns, WindowOrder(TS, 10.0, 1 << 45)) == IndexPlan(eq, None)  # keys inexact in float
