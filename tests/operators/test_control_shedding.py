"""S2J's shed ratio and the replay-deterministic per-record shed decision."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.control.shedding import ShedCounts, shed_mask, shed_ratio


def test_linear_model_by_hand():
    # SR = B + (1 - B) / (1 - tau1) * (tau - tau1)
    assert shed_ratio(0.9, tau1=0.8, base=0.1) == pytest.approx(0.1 + 0.9 / 0.2 * 0.1)
    assert shed_ratio(0.8, tau1=0.8, base=0.1) == 0.0  # at tau1 nothing is shed; just above, B
    assert shed_ratio(0.8000001, tau1=0.8, base=0.1) == pytest.approx(0.1, abs=1e-5)
    assert shed_ratio(1.0, tau1=0.8, base=0.1) == pytest.approx(1.0)
    assert shed_ratio(1.7, tau1=0.8, base=0.1) == 1.0
    assert shed_ratio(0.3, tau1=0.8) == 0.0


def test_quadratic_model_by_hand():
    assert shed_ratio(0.9, tau1=0.8, base=0.1, model="quadratic") == pytest.approx(0.1 + 0.9 * 0.25)
    with pytest.raises(ValueError, match="'linear' or 'quadratic'"):
        shed_ratio(0.9, 0.8, model="cubic")


@given(a=st.floats(0, 2), b=st.floats(0, 2), base=st.floats(0, 1), model=st.sampled_from(["linear", "quadratic"]))
def test_ratio_grows_with_utilisation_and_stays_a_fraction(a, b, base, model):
    lo, hi = sorted((a, b))
    r_lo, r_hi = shed_ratio(lo, 0.8, base, model), shed_ratio(hi, 0.8, base, model)
    assert 0 <= r_lo <= r_hi <= 1
    if model == "quadratic" and hi > 0.8:
        assert r_hi <= shed_ratio(hi, 0.8, base, "linear") + 1e-12  # gentler than linear, same end points


@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.3, 0.5, 0.97, 1.0])
def test_shed_fraction_matches_the_ratio(ratio):
    mask = shed_mask(ratio, "orders", 3, np.arange(200_000, 400_000))
    assert abs(mask.mean() - ratio) < 0.005  # binomial sd <= 0.0012


def test_same_record_same_decision_in_another_process():
    offsets = list(range(1000, 3000))
    code = (
        "import json, sys, numpy as np\n"
        "from windjoin.operators.control.shedding import shed_mask\n"
        "print(json.dumps(shed_mask(0.4, 'orders', 7, np.array(json.loads(sys.argv[1]))).tolist()))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(offsets)], capture_output=True, env=env, check=True)
    assert json.loads(out.stdout) == shed_mask(0.4, "orders", 7, np.array(offsets)).tolist()


@given(
    offsets=st.lists(st.integers(0, 2**62), max_size=200),
    a=st.floats(0, 1),
    b=st.floats(0, 1),
    partition=st.integers(0, 1000),
)
def test_replay_and_chunking_do_not_change_decisions_and_higher_ratios_only_add(offsets, a, b, partition):
    lo, hi = sorted((a, b))
    arr = np.array(offsets, dtype=np.int64)
    whole = shed_mask(lo, "t", partition, arr)
    one_by_one = [bool(shed_mask(lo, "t", partition, arr[i : i + 1])[0]) for i in range(len(arr))]
    assert whole.tolist() == one_by_one
    assert not (whole & ~shed_mask(hi, "t", partition, arr)).any()  # shed at lo => shed at hi


def test_partitions_and_topics_decide_independently():
    offsets = np.arange(100_000)
    a, b, c = shed_mask(0.5, "t", 0, offsets), shed_mask(0.5, "t", 1, offsets), shed_mask(0.5, "u", 0, offsets)
    for x, y in ((a, b), (a, c), (b, c)):
        assert abs((x & y).mean() - 0.25) < 0.01  # independent halves overlap in a quarter


def test_counts_per_stream():
    counts = ShedCounts()
    counts.add("R", np.array([True, False, False, True]))
    counts.add("S", np.array([False]))
    counts.add("R", np.array([True]))
    assert (counts.kept, counts.shed) == ({"R": 2, "S": 1}, {"R": 3, "S": 0})
    assert counts.fraction("R") == 0.6 and counts.fraction("X") == 0.0
    both = counts.merged(ShedCounts({"S": 4, "T": 1}, {"S": 1}))
    assert (both.kept, both.shed) == ({"R": 2, "S": 5, "T": 1}, {"R": 3, "S": 1, "T": 0})
