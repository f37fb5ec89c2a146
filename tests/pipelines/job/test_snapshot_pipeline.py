"""Punctuation on the real pipeline (Kafka → Spark → Parquet, Redis, snapshots from `build_sinks`).

Punctuation records of R are produced among ordinary events. Then: they are neither joined nor dead-lettered
(results equal the oracle over the other events, no refused rows); the batches holding them, and only those,
close a snapshot of every task, in consecutive ranges from batch 0; Redis records the latest snapshot.
"""

from __future__ import annotations

import uuid

import pytest

from tests.pipelines.pipeline_helpers import (
    parquet_pairs,
    produce_events,
    punctuated_events,
    punctuated_spec,
    redis_pairs,
)
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.redis.sink import clear_task
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import BatchOutcome, start_job
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000


@pytest.mark.slow
def test_punctuation_closes_snapshots_in_the_pipeline(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    tasks = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]  # Redis keys of this test only
    spec_dict = punctuated_spec(tasks, unique_topic, tmp_path, redis_url, retain_ms=10**12)
    punctuate_at = {250, 520}
    events = punctuated_events(700, punctuate_at, seed=4, base_ts=BASE_TS)
    produce_events(kafka_bootstrap, spec_dict, events, topic_partitions=1)
    spec = parse_spec(spec_dict)
    sinks = build_sinks(spec)
    outcomes: list[BatchOutcome] = []
    query = start_job(spark, spec, kafka_bootstrap, sinks, available_now=True, on_batch=outcomes.append)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    redis_sink = sinks[1]
    try:
        ordinary = [e for i, e in enumerate(events) if i not in punctuate_at]
        expected, late = oracle_join(spec_dict, ordinary)
        assert not late and len(expected) > 200
        assert as_multiset(parquet_pairs(ParquetSink(tmp_path / "parquet"), spec_dict)) == as_multiset(expected)
        assert as_multiset(redis_pairs(redis_sink, spec_dict)) == as_multiset(expected)
        assert all(not o.dead_by_reason for o in outcomes)  # punctuations are not refused records
        assert sum(o.punctuations for o in outcomes) == len(punctuate_at)
        punctuated = sorted(o.batch_id for o in outcomes if o.punctuations)
        assert len(outcomes) > 2 and punctuated
        store = SnapshotStore(tmp_path / "parquet")
        for task in tasks:
            snapshots = store.list(task)
            assert [s.last_batch for s in snapshots] == punctuated
            assert {s.reason for s in snapshots} == {"punctuation"}
            assert [s.first_batch for s in snapshots] == [0] + [s.last_batch + 1 for s in snapshots[:-1]]
            assert int(redis_sink.client.hget(meta_key(task, "windjoin"), "snapshot")) == snapshots[-1].id
        closed = [(s.task, s.last_batch) for o in outcomes for s in o.snapshots]
        assert sorted(closed) == sorted((task, b) for task in tasks for b in punctuated)
    finally:
        for task in tasks:
            clear_task(redis_sink.client, task, redis_sink.namespace)
        redis_sink.close()
