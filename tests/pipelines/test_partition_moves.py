"""Partition moves in the running job (real Kafka, Redis, Spark): the window state travels with the partition.

The test plays the controller: after chosen batches it records a new routing decision in Redis, which the job
follows (announce batch: old slots hand the state over; effective batch: new slots install it). One announce
batch fails after its sinks wrote (the job dies there) and the job is restarted from its checkpoint, so the
replayed batch hands the same state over again. Every result must equal the brute-force oracle exactly: a
pair lost or joined twice at a move shows up as a difference.
"""

from __future__ import annotations

import uuid

import pytest
from pyspark.errors import StreamingQueryException

from tests.oracle import as_multiset, oracle_join
from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events, redis_pairs
from tests.pipelines.test_pipeline_e2e import _events, _spec
from windjoin.connectors.control_decisions import DecisionStore
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.redis_sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.join_job import BatchOutcome, ControlSource, start_job

TASKS = [
    {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
    {
        "name": "eq_band",
        "join": ["S", "R"],
        "on": [{"op": "eq", "left": "S.k", "right": "R.k"}, {"op": "band", "left": "S.a", "right": "R.x", "width": 5}],
    },
]
# Routing decisions (8 partitions, round robin on 2 slots at first), recorded after the batch id named.
DECISIONS = {
    1: [1, 1, 1, 1, 0, 1, 2, 1],  # p0, p2 to slot 1; p6 to a new slot 2
    5: [1, 0, 2, 1, 0, 2, 0, 2],  # p1 to slot 0, p2 and p7 to slot 2, p5 to slot 2, p6 back to slot 0
}


def record_routing(store: DecisionStore, version: int, slot_of: list[int], shed_ratio: float = 0.0) -> None:
    """A decision as `windjoin controller` records it (the fields the job reads)."""
    import orjson

    store.record(
        {
            "epoch": version,
            "routing_version": version,
            "routing": orjson.dumps({"slot_of": slot_of, "split": []}).decode(),
            "slots": max(slot_of) + 1,
            "shed_ratio": repr(shed_ratio),
            "sustained_above": 0,
            "sustained_below": 0,
            "load_cursor": "0-0",
        }
    )


@pytest.mark.slow
def test_moves_during_the_run_lose_and_duplicate_nothing(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    window = {"kind": "time", "size_ms": 40}
    spec_dict = _spec(
        unique_topic, tmp_path, window, keyed=True, tasks=TASKS, max_offsets_per_trigger=250, allowed_lateness_ms=5000
    )
    events = _events(2400, seed=7, keys=24)
    produce_events(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    namespace = f"t{uuid.uuid4().hex[:8]}"
    decisions = DecisionStore(redis_url, namespace)
    parquet = ParquetSink(tmp_path / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12, namespace=namespace)
    seen: list[BatchOutcome] = []
    failed = []

    def on_batch(outcome: BatchOutcome) -> None:
        seen.append(outcome)
        moved_out = [p for s in outcome.stats for p in s["moved_out"]]
        if moved_out and not failed:
            failed.append(outcome.batch_id)
            raise RuntimeError("injected failure after an announce batch's sinks wrote")
        version = len([b for b in DECISIONS if b <= outcome.batch_id])
        if outcome.batch_id in DECISIONS:
            record_routing(decisions, version, DECISIONS[outcome.batch_id])

    control = ControlSource(redis_url, namespace)
    query = start_job(spark, spec, kafka_bootstrap, [parquet, redis], True, on_batch, control)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        query.awaitTermination(timeout=600)
    assert failed
    query = start_job(spark, spec, kafka_bootstrap, [parquet, redis], True, on_batch, control)
    query.awaitTermination(timeout=600)
    assert query.exception() is None

    moved_in = {p for o in seen for s in o.stats for p in s["moved_in"]}
    moved_out = {p for o in seen for s in o.stats for p in s["moved_out"]}
    assert moved_out == moved_in == {0, 1, 2, 5, 6, 7}, (moved_out, moved_in)
    assert max(o.routing_version for o in seen) == 2
    assert [o.batch_id for o in seen].count(failed[0]) == 2, "the failed announce batch was not replayed"
    expected, late = oracle_join(spec_dict, events)
    assert not late and len(expected) > 300
    assert as_multiset(parquet_pairs(parquet, spec_dict)) == as_multiset(expected)
    assert as_multiset(redis_pairs(redis, spec_dict)) == as_multiset(expected)
