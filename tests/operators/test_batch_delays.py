"""The slots' delay histograms merged on the driver give the same percentiles as every pair's delay would."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.batch_delays import Delays

slots = st.lists(st.lists(st.integers(-5, 50), max_size=40), min_size=1, max_size=4)


@given(slots, st.sampled_from([0, 1, 50, 99, 100]))
def test_merged_histograms_equal_the_plain_delays(per_slot: list[list[int]], q: int) -> None:
    parts = [[h.values.tolist(), h.counts.tolist()] for h in (Delays.of(np.asarray(d, np.int64)) for d in per_slot)]
    merged = Delays.merge(parts)
    plain = np.sort(np.concatenate([np.asarray(d, np.int64) for d in per_slot]))
    assert len(merged) == len(plain)
    assert merged.expanded().tolist() == plain.tolist()
    if len(plain):
        assert merged.percentile(q) == np.percentile(plain, q, method="inverted_cdf")
