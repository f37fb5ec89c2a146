"""The join job's metrics account for a batch outcome as the sinks saw it (no Spark: outcomes built by hand)."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from windjoin.pipelines.job_metrics import DELAY_BUCKETS, JobMetrics
from windjoin.pipelines.join_job import BatchOutcome


def _outcome(batch_id: int, delays_ms: list[int]) -> BatchOutcome:
    return BatchOutcome(
        batch_id,
        pairs={"eq": 7, "band": 2},
        dead_by_reason={"late": 3, "wrong_type": 1},
        stats=[
            {"slot": 2, "rows": 100, "joined": 96, "segments": 4, "window_tuples": 900, "seconds": 0.4},
            {"slot": 0, "rows": 50, "joined": 50, "segments": 2, "window_tuples": 400, "seconds": 1.5},
        ],
        delays_ms=np.asarray(delays_ms, dtype=np.int64),
        finished_at=1_700_000_000.5,
    )


def test_counters_add_up_over_batches_and_gauges_keep_the_last():
    m = JobMetrics()
    m.observe(_outcome(0, [100, 900, 2500]))
    m.observe(_outcome(1, [50_000]))
    value = m.registry.get_sample_value
    assert value("windjoin_job_input_rows_total", {"slot": "2"}) == 200
    assert value("windjoin_job_joined_rows_total", {"slot": "2"}) == 192
    assert value("windjoin_job_pairs_total", {"task": "eq"}) == 14
    assert value("windjoin_job_dead_letters_total", {"reason": "late"}) == 6
    assert value("windjoin_job_batches_total") == 2
    assert value("windjoin_job_batch_id") == 1
    assert value("windjoin_job_window_tuples", {"slot": "0"}) == 400
    assert value("windjoin_job_slot_batch_seconds_count", {"slot": "0"}) == 2
    assert value("windjoin_job_last_batch_timestamp_seconds") == 1_700_000_000.5


def test_delay_histogram_counts_every_pair_in_its_bucket():
    m = JobMetrics()
    delays = np.random.default_rng(1).integers(0, 400_000, 10_000)
    m.observe(_outcome(0, delays.tolist()))
    value = m.registry.get_sample_value
    assert value("windjoin_job_production_delay_seconds_count") == 10_000
    assert value("windjoin_job_production_delay_seconds_sum") == pytest.approx(delays.sum() / 1000)
    for bound in DELAY_BUCKETS:  # le semantics: a value equal to the bound is in the bucket
        expected = int((delays / 1000 <= bound).sum())
        assert value("windjoin_job_production_delay_seconds_bucket", {"le": f"{bound:g}"}) == expected
    assert value("windjoin_job_production_delay_seconds_bucket", {"le": "+Inf"}) == 10_000


def test_served_over_http():
    m = JobMetrics()
    m.observe(_outcome(5, [1000]))
    server, thread = m.serve(0, addr="127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
        thread.join(5)
    assert "windjoin_job_batch_id 5.0" in body
    assert 'windjoin_job_production_delay_seconds_bucket{le="1"} 1.0' in body
