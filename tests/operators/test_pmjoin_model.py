"""The rate-based cost model against an independent brute-force count of join results on simulated windows."""

from __future__ import annotations

import bisect
import itertools
import random
import statistics

import numpy as np
import pytest

from tests.operators.pmjoin_queries import single_attribute_query
from windjoin.operators.pmjoin.model import EqualityClass, Query, RateModel, Stream


def simulate(rates_per_value, windows, horizon, seed, values_per_attr=None):
    """Poisson arrivals: a list per stream of (time, value) in time order (value = tuple of attribute values)."""
    rng = random.Random(seed)
    out = []
    for per_value in rates_per_value:
        tuples = []
        for v, rate in enumerate(per_value):
            t = rng.expovariate(rate) if rate else horizon
            while t < horizon:
                tuples.append((t, v))
                t += rng.expovariate(rate)
        tuples.sort()
        out.append(tuples)
    return out


def _between(tuples, lo, hi):
    """The tuples with lo <= time < hi (tuples are in time order)."""
    return tuples[bisect.bisect_left(tuples, (lo,)) : bisect.bisect_left(tuples, (hi,))]


def brute_force_rate(streams, windows, horizon, matches, warmup, same_value_only=False):
    """Results per second: combinations emitted when their last tuple arrives, the others within their windows."""
    count = 0
    for i, own in enumerate(streams):
        for t, v in own:
            if t < warmup:
                continue
            others = []
            for j, other in enumerate(streams):
                if j != i:
                    others.append(_between(other, t - windows[j], t))
            if same_value_only:  # a pre-filter for speed; the predicate below still decides
                others = [[(u, w) for (u, w) in o if w == v] for o in others]
            for combo in itertools.product(*others):
                values = [v] + [w for _, w in combo]
                idx = [i] + [j for j in range(len(streams)) if j != i]
                if matches(dict(zip(idx, values, strict=True))):
                    count += 1
    return count / (horizon - warmup)


def brute_force_window(streams, windows, horizon, matches, samples):
    """Mean number of matching combinations whose tuples are all inside their windows at sampled times."""
    total = 0
    for t in samples:
        alive = [_between(s, t - windows[j], t) for j, s in enumerate(streams)]
        for combo in itertools.product(*alive):
            if matches({j: w for j, (_, w) in enumerate(combo)}):
                total += 1
    return total / len(samples)


def assert_agrees(measured: list[float], expected: float) -> None:
    """The mean of independent runs is within 3 standard errors of the model, and within 10%."""
    mean = statistics.mean(measured)
    se = statistics.stdev(measured) / len(measured) ** 0.5
    assert abs(mean - expected) <= 3 * se + 1e-12, (mean, se, expected)
    assert mean == pytest.approx(expected, rel=0.1)


SEEDS = range(8)


def test_three_way_same_attribute_rate_and_window_match_a_brute_force_count():
    rates = [[4.0, 1.0, 0.5], [1.0, 3.0, 2.0], [2.0, 0.5, 3.0]]
    windows = [1.0, 0.6, 0.8]
    horizon, warmup = 300.0, 2.0
    same = lambda vals: len(set(vals.values())) == 1  # noqa: E731
    model = RateModel(single_attribute_query(rates, windows, ["n0", "n1", "n2"]))
    runs = [simulate(rates, windows, horizon, seed) for seed in SEEDS]
    assert_agrees([brute_force_rate(s, windows, horizon, same, warmup, True) for s in runs], model.rate(0b111))
    pairs = [brute_force_rate(s[:2], windows[:2], horizon, same, warmup, True) for s in runs]
    assert_agrees(pairs, model.rate(0b011))
    samples = np.linspace(warmup, horizon, 100)
    assert_agrees([brute_force_window(s, windows, horizon, same, samples) for s in runs[:4]], model.window(0b111))


def test_two_attribute_chain_matches_a_brute_force_count():
    """S0.a = S1.a and S1.b = S2.b, attributes independent within each stream: F is the product of the classes."""
    pa = [[0.7, 0.3], [0.2, 0.8]]  # S0, S1 over a
    pb = [[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]  # S1, S2 over b
    lam, windows = [6.0, 5.0, 4.0], [1.0, 0.8, 0.5]
    horizon, warmup = 200.0, 2.0

    def matches(vals):
        return vals[0][0] == vals[1][0] and vals[1][1] == vals[2][1]

    measured = []
    for seed in SEEDS:
        rng = random.Random(seed)
        streams = []
        for i, rate in enumerate(lam):
            tuples, t = [], rng.expovariate(rate)
            while t < horizon:
                a = rng.choices([0, 1], pa[i])[0] if i < 2 else None
                b = rng.choices([0, 1, 2], pb[i - 1])[0] if i >= 1 else None
                tuples.append((t, (a, b)))
                t += rng.expovariate(rate)
            streams.append(tuples)
        measured.append(brute_force_rate(streams, windows, horizon, matches, warmup))
    cls_a = EqualityClass("a", (0, 1), ("a", "a"), np.arange(2), np.array(pa))
    cls_b = EqualityClass("b", (1, 2), ("b", "b"), np.arange(3), np.array(pb))
    streams_stats = tuple(Stream(f"S{i}", f"n{i}", r, r * w) for i, (r, w) in enumerate(zip(lam, windows, strict=True)))
    model = RateModel(Query(streams_stats, ("n0", "n1", "n2"), (cls_a, cls_b)))
    assert_agrees(measured, model.rate(0b111))


def test_example2_table2_from_selectivities():
    """Example 2 (equal tuple sizes): S2,3 has λ 15, W 75; S0,2,3 has λ 9, W 30 (Table 2)."""
    rates, windows = [10, 35, 25, 30, 15], [100, 350, 250, 300, 150]
    streams = tuple(
        Stream(f"S{i}", n, r, w)
        for i, (n, r, w) in enumerate(zip(["n0", "n0", "n1", "n1", "n2"], rates, windows, strict=True))
    )
    edges = [((0, 1), 0.01), ((2, 3), 0.001), ((0, 2), 0.004), ((0, 4), 0.0001), ((1, 4), 0.0001)]
    classes = tuple(EqualityClass(f"e{k}", m, ("x", "y"), selectivity=f) for k, (m, f) in enumerate(edges))
    model = RateModel(Query(streams, ("n0", "n1", "n2"), classes, sized_results=False))
    assert model.rate(0b00011) == pytest.approx(70)
    assert model.stats(0b01100) == pytest.approx((15, 75))
    assert model.stats(0b01101) == pytest.approx((9, 30))


def test_rates_of_a_partition_add_up_to_the_unpartitioned_rate():
    query = single_attribute_query([[1, 2, 3, 0], [4, 0, 1, 1], [2, 2, 2, 2]], [1.0, 2.0, 0.5], ["a", "b", "c"])
    model = RateModel(query)
    groups = [np.array([0, 3]), np.array([1]), np.array([2])]
    for mask in range(1, 8):
        parts = [model.restricted(0, g).stats(mask) for g in groups]
        assert sum(p[0] for p in parts) == pytest.approx(model.rate(mask))
        assert sum(p[1] for p in parts) == pytest.approx(model.window(mask))
