"""The synthetic workload (pure, no broker): b-model key skew, Poisson arrivals, events shaped by the spec.

Statistical checks use fixed seeds (so they are reproducible) and tolerances of several standard errors of the
estimate at the sample size used, so a correct generator passes with any seed too (odds of a false failure
below ~1e-4 per check).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from windjoin.operators.schema import StreamSchema
from windjoin.operators.spec import parse_spec
from windjoin.operators.workloads.b_model import (
    CHUNK_S,
    BModel,
    PoissonClock,
    Workload,
    WorkloadConfig,
    join_attribute,
    poisson_arrivals,
)

SPEC = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": {"key": "k", "fields": {"k": "int", "x": "int", "y": "float", "z": "string"}},
            "S": {"key": "j", "fields": {"j": "int", "a": "int", "b": "float", "d": "bool"}},
        },
        "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.j"}]}],
    }
)


def binomial_pmf(n: int, p: float) -> np.ndarray:
    return np.array([math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)])


# ---- b-model ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [0.5, 0.6, 0.7, 0.9])
def test_bmodel_probabilities_on_a_power_of_two_domain_are_the_binomial_cascade(bias: float) -> None:
    """In 2^n keys, C(n, c) keys have probability b^(n-c) (1-b)^c: the b-model's defining property."""
    n = 10
    model = BModel(2**n, bias, seed=3)
    probabilities = np.sort(model.probabilities())[::-1]
    expected = np.sort(
        np.concatenate([np.full(math.comb(n, c), bias ** (n - c) * (1 - bias) ** c) for c in range(n + 1)])
    )[::-1]
    np.testing.assert_allclose(probabilities, expected, rtol=1e-9)
    assert probabilities.sum() == pytest.approx(1.0)
    key, p = model.hottest()
    assert p == pytest.approx(bias**n)
    assert model.probabilities()[key] == pytest.approx(p)


def test_bmodel_on_any_domain_sums_to_one_and_scatters_its_hot_keys() -> None:
    model = BModel(1000, 0.7, seed=1)
    probabilities = model.probabilities()
    assert probabilities.sum() == pytest.approx(1.0)
    key, p = model.hottest()
    assert probabilities.argmax() == key
    assert p == pytest.approx(probabilities.max())
    # Hot halves are chosen per split by the seed: another seed puts the hottest key elsewhere.
    assert {BModel(1000, 0.7, seed=s).hottest()[0] for s in range(8)} != {key}
    assert len(BModel(1, 0.7).probabilities()) == 1


def test_bmodel_sampler_matches_the_model() -> None:
    """Over N draws from 2^10 keys with b = 0.7:

    * the hottest key's share is Binomial(N, b^10)/N: within 5 standard errors of b^10 = 0.0282;
    * the share landing in the hot half of the first split is within 5 standard errors of b;
    * the number of cold choices per draw is Binomial(10, 1-b): chi-square over its 11 classes (pooled to
      expected counts >= 5) stays below the 0.1% critical value for its degrees of freedom.
    """
    n, bias, draws = 10, 0.7, 200_000
    model = BModel(2**n, bias, seed=11)
    keys = model.sample(draws, np.random.default_rng(5))
    assert keys.min() >= 0 and keys.max() < 2**n
    counts = np.bincount(keys, minlength=2**n)

    hot_key, p_hot = model.hottest()
    se = math.sqrt(p_hot * (1 - p_hot) / draws)
    assert abs(counts[hot_key] / draws - p_hot) < 5 * se, (counts[hot_key] / draws, p_hot, se)
    assert counts.argmax() == hot_key

    hot_half = slice(0, 2 ** (n - 1)) if hot_key < 2 ** (n - 1) else slice(2 ** (n - 1), 2**n)
    share = counts[hot_half].sum() / draws
    assert abs(share - bias) < 5 * math.sqrt(bias * (1 - bias) / draws)

    # Class of each key: how many cold choices lead to it, read off its probability b^(n-c) (1-b)^c.
    probabilities = model.probabilities()
    cold = np.rint(np.log(probabilities / bias**n) / math.log((1 - bias) / bias)).astype(int)
    observed = np.bincount(cold[keys], minlength=n + 1).astype(float)
    expected = binomial_pmf(n, 1 - bias) * draws
    last = int(np.flatnonzero(expected[::-1].cumsum() >= 5)[0])  # pool the tail classes until expected >= 5
    cut = n - last
    obs = np.append(observed[:cut], observed[cut:].sum())
    exp = np.append(expected[:cut], expected[cut:].sum())
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    critical_001 = {7: 24.32, 8: 26.12, 9: 27.88, 10: 29.59}[df]  # chi-square 0.999 quantiles
    assert chi2 < critical_001, (chi2, df, obs, exp)


def test_bmodel_sampler_on_the_papers_domain() -> None:
    """10^7 + 1 keys (the paper's [0 .. 10 x 10^6]): values in range, skewed far beyond uniform."""
    model = BModel(10_000_001, 0.7, seed=0)
    keys = model.sample(50_000, np.random.default_rng(1))
    assert keys.min() >= 0 and keys.max() <= 10_000_000
    _, p_hot = model.hottest()
    assert 0.7**24 <= p_hot <= 0.7**23  # 24 splits on the longest path, 23 on the shortest
    # Uniform keys would almost never repeat in 50k draws; the b-model repeats its hot keys.
    assert max(Counter(keys.tolist()).values()) > 3


def test_bmodel_half_bias_is_uniform_and_bad_arguments_are_refused() -> None:
    np.testing.assert_allclose(BModel(64, 0.5).probabilities(), np.full(64, 1 / 64))
    with pytest.raises(ValueError, match=r"bias b must be in \[0.5, 1\]"):
        BModel(64, 0.3)
    with pytest.raises(ValueError, match="n_keys"):
        BModel(0, 0.7)
    assert set(BModel(8, 1.0, seed=2).sample(100, np.random.default_rng(0)).tolist()) == {
        BModel(8, 1.0, 2).hottest()[0]
    }


# ---- Poisson arrivals ---------------------------------------------------------------------------------------


def test_poisson_inter_arrival_times_have_the_rates_mean_and_variance() -> None:
    """rate 1000/s for 200 s: ~200k exponential gaps. Standard errors at that size: mean (1/rate)/sqrt(N)
    (0.22%); variance (1/rate^2) sqrt(8/N) (the exponential's fourth moment is 9 sigma^4; 0.63%);
    count sqrt(rate T) (0.22%); counts per 1 s bin have variance/mean 1 with standard error sqrt(2/199)."""
    rate, duration = 1000.0, 200.0
    arrivals = poisson_arrivals(rate, duration, np.random.default_rng(42))
    n = arrivals.size
    assert abs(n - rate * duration) < 5 * math.sqrt(rate * duration)
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] >= 0 and arrivals[-1] < duration
    gaps = np.diff(arrivals, prepend=0.0)
    assert abs(gaps.mean() - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    assert abs(gaps.var() - 1 / rate**2) < 5 * (1 / rate**2) * math.sqrt(8 / n)
    per_second = np.bincount(arrivals.astype(int), minlength=int(duration))
    dispersion = per_second.var(ddof=1) / per_second.mean()
    assert abs(dispersion - 1) < 5 * math.sqrt(2 / (duration - 1))


def test_poisson_clock_read_in_slices_is_the_same_process() -> None:
    whole = PoissonClock(300, np.random.default_rng(7)).until(10.0)
    clock = PoissonClock(300, np.random.default_rng(7))
    pieces = [clock.until(t) for t in np.arange(0.05, 10.0001, 0.05)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    with pytest.raises(ValueError, match="rate"):
        PoissonClock(0, np.random.default_rng(0))


# ---- events -------------------------------------------------------------------------------------------------


def collect(workload: Workload) -> list[tuple[str, float, dict]]:
    out = []
    for piece in workload.slices():
        assert piece.end_s - piece.start_s <= CHUNK_S + 1e-9
        assert np.all((piece.offsets_s >= piece.start_s) & (piece.offsets_s < piece.end_s))
        out.extend(zip(piece.streams, piece.offsets_s.tolist(), piece.events, strict=True))
    return out


def test_workload_events_fit_the_spec_in_arrival_order_at_the_rate() -> None:
    start_ms, rate, duration = 1_700_000_000_000, 400.0, 5.0
    events = collect(Workload(SPEC, WorkloadConfig(rate=rate, duration_s=duration, seed=1, start_ms=start_ms)))
    offsets = [t for _, t, _ in events]
    assert offsets == sorted(offsets)
    schemas = {name: StreamSchema(stream) for name, stream in SPEC.streams.items()}
    by_stream = Counter()
    for name, offset, event in events:
        by_stream[name] += 1
        assert set(event) == {"ts", *SPEC.streams[name].fields}
        schemas[name].check(event)  # types and ranges as the join wants them
        assert event["ts"] == start_ms + math.floor(offset * 1000)
    for name in SPEC.streams:
        assert abs(by_stream[name] - rate * duration) < 5 * math.sqrt(rate * duration)
    r_events = [e for n, _, e in events if n == "R"]
    assert all(1 <= e["x"] <= 10_000 and 1 <= e["y"] < 10_000 and len(e["z"]) == 8 for e in r_events)
    assert all(isinstance(e["d"], bool) for n, _, e in events if n == "S")


def test_workload_is_reproducible_and_its_streams_share_the_hot_keys() -> None:
    config = WorkloadConfig(rate=2000, duration_s=5.0, seed=9, n_keys=256, bias=0.8)
    first, again = collect(Workload(SPEC, config)), collect(Workload(SPEC, config))
    assert first == again
    other = collect(Workload(SPEC, WorkloadConfig(rate=2000, duration_s=5.0, seed=10, n_keys=256, bias=0.8)))
    assert first != other
    r_keys = Counter(e["k"] for n, _, e in first if n == "R")
    s_keys = Counter(e["j"] for n, _, e in first if n == "S")
    hot_key, p_hot = BModel(256, 0.8, seed=9).hottest()
    assert r_keys.most_common(1)[0][0] == hot_key == s_keys.most_common(1)[0][0]
    n_r = sum(r_keys.values())
    assert abs(r_keys[hot_key] / n_r - p_hot) < 5 * math.sqrt(p_hot * (1 - p_hot) / n_r)


def test_join_attribute_is_the_key_else_the_first_eq_field_else_none() -> None:
    spec = parse_spec(
        {
            "window": {"kind": "count", "size": 10},
            "streams": {
                "A": {"fields": {"p": "int", "q": "string"}},
                "B": {"fields": {"q": "string", "r": "float"}},
                "C": {"fields": {"v": "float"}},
            },
            "tasks": [
                {"name": "ab", "join": ["A", "B"], "on": [{"op": "eq", "left": "A.q", "right": "B.q"}]},
                {"name": "bc", "join": ["B", "C"], "on": [{"op": "band", "left": "B.r", "right": "C.v", "width": 1}]},
            ],
        }
    )
    assert [join_attribute(spec, s) for s in ("A", "B", "C")] == ["q", "q", None]
    assert join_attribute(SPEC, "S") == "j"
    events = collect(Workload(spec, WorkloadConfig(rate=500, duration_s=1.0, n_keys=100)))
    a_keys = {e["q"] for n, _, e in events if n == "A"}
    assert a_keys and all(k.isdigit() and int(k) < 100 for k in a_keys)  # string join keys carry the key's text


def test_workload_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="rate"):
        WorkloadConfig(rate=0)
    with pytest.raises(ValueError, match="duration"):
        WorkloadConfig(duration_s=-1)


def test_partition_skew_puts_the_b_model_on_the_hash_partitions():
    from windjoin.operators.partitioning import partition_of
    from windjoin.operators.workloads.b_model import BModel, PartitionSkewedKeys

    keys = PartitionSkewedKeys(10_000_001, 32, 0.7, seed=3).sample(400_000, np.random.default_rng(0))
    shares = np.bincount(partition_of(keys, 32), minlength=32) / len(keys)
    assert np.abs(shares - BModel(32, 0.7, seed=3).probabilities()).max() < 0.005
    assert len(np.unique(keys)) > 100_000  # keys stay spread inside each partition: few partners per tuple


def test_slot_aligned_skew_gives_the_busiest_round_robin_slot_b_to_the_log_slots():
    from windjoin.operators.partitioning import partition_of
    from windjoin.operators.workloads.b_model import BModel, PartitionSkewedKeys

    keys = PartitionSkewedKeys(5_000, 64, 0.7, seed=3, slots=8).sample(400_000, np.random.default_rng(0))
    parts = partition_of(keys, 64)
    per_slot = np.bincount(parts % 8, minlength=8) / len(keys)  # round robin: slot = partition mod 8
    assert per_slot.max() == pytest.approx(0.7**3, abs=0.005)
    # the same b-model masses, only placed differently over the partitions
    masses = np.sort(np.bincount(parts, minlength=64) / len(keys))
    assert np.abs(masses - np.sort(BModel(64, 0.7, seed=3).probabilities())).max() < 0.005
    with pytest.raises(ValueError, match="slots dividing partitions"):
        PartitionSkewedKeys(5_000, 64, 0.7, seed=3, slots=6)
