"""A batch of hundreds of thousands of result pairs passes the driver by: its Python process does not grow.

The slots stage their results in Parquet and Redis from the executors (their Python workers are other
processes) and the driver only reads their summaries and commits. Before, foreachBatch collected every pair
to the driver, built tables, encoded Redis members there: well over 100 MB more for this batch.
"""

from __future__ import annotations

import resource
import uuid

import pytest

from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events
from tests.support.pipeline_events import pipeline_events, pipeline_spec
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job

EVENTS = 1600  # two keys, all within the window: ~2 * 400 * 400 pairs
GROWTH_LIMIT_MB = 25


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


@pytest.mark.slow
def test_a_large_batch_leaves_the_driver_memory_flat(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    tasks = [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}]
    spec_dict = pipeline_spec(unique_topic, tmp_path, {"kind": "time", "size_ms": 60_000}, True, tasks)
    spec_dict["allowed_lateness_ms"] = 600_000
    spec = parse_spec(spec_dict)
    events = pipeline_events(EVENTS + 40, seed=3, keys=2)
    parquet = ParquetSink(tmp_path / "parquet")
    redis_sink = RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")
    outcomes = []

    def run() -> None:
        query = start_job(spark, spec, kafka_bootstrap, [parquet, redis_sink], True, outcomes.append)
        query.awaitTermination(timeout=600)
        assert query.exception() is None

    try:
        produce_events(kafka_bootstrap, spec_dict, events[:40])
        run()  # warm-up: every module the driver's batch path needs is loaded, the first probes are read
        produce_events(kafka_bootstrap, spec_dict, events[40:])
        before, warm = _peak_rss_mb(), len(outcomes)
        run()
        growth = _peak_rss_mb() - before
        large = outcomes[warm:]
        pairs = sum(sum(o.pairs.values()) for o in large)
        expected, late = oracle_join(spec_dict, events)
        assert not late
        assert pairs > 250_000 and pairs + sum(sum(o.pairs.values()) for o in outcomes[:warm]) == len(expected)
        commit_s = max(o.commit_seconds for o in large)
        print(f"{pairs} pairs in {len(large)} batch(es): driver peak RSS +{growth:.1f} MB, commit {commit_s:.3f} s")
        assert growth < GROWTH_LIMIT_MB, f"the driver grew {growth:.1f} MB over a batch of {pairs} pairs"
        assert sum(len(o.delays_ms) for o in outcomes) == len(expected)  # every pair's delay, as a histogram
        assert redis_sink.count("eq") == len(expected)
        assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
    finally:
        redis_sink.clear("eq")
        redis_sink.close()
