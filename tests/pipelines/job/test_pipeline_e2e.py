"""The streaming job end to end on real services: Kafka (embedded broker) → Spark → Parquet and Redis.

Results in both sinks must equal the brute-force oracle on the same events, as multisets.
"""

from __future__ import annotations

import uuid

import pytest

from tests.pipelines.control_helpers import run_with_one_replay
from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events, redis_pairs
from tests.support.pipeline_events import pipeline_events, pipeline_spec
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import BatchOutcome, ControlSource, start_job


def _run(spark, spec_dict: dict, bootstrap: str, redis_url: str, tmp_path) -> tuple[list, list]:
    spec = parse_spec(spec_dict)
    parquet = ParquetSink(tmp_path / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")
    outcomes: list[BatchOutcome] = []
    query = start_job(spark, spec, bootstrap, [parquet, redis], available_now=True, on_batch=outcomes.append)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    limit = spec.max_offsets_per_trigger
    if limit:  # the spec's batch limit reached the reader: every batch within it, and planned with it
        assert outcomes and all(o.records <= limit and o.batch_limit == limit for o in outcomes if o.records)
    return parquet_pairs(parquet, spec_dict), redis_pairs(redis, spec_dict)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("size_ms", "per_ms", "keys"),
    [(40, 1, 30), (0, 8, 5)],  # size 0 pairs only equal event times: 8 events a millisecond over few keys
    ids=["size40", "size0"],
)
def test_equi_join_time_window_over_partitions_and_batches(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path, size_ms: int, per_ms: int, keys: int
):
    tasks = [
        {"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {
            "name": "eq_band",
            "join": ["S", "R"],
            "on": [
                {"op": "eq", "left": "S.k", "right": "R.k"},
                {"op": "band", "left": "S.a", "right": "R.x", "width": 5},
            ],
        },
    ]
    # Batches cut each topic by offsets, so one stream runs ahead of the other inside a batch: the lateness
    # allowance must cover that disorder, or the lagging stream's tuples are (rightly) dead-lettered as late.
    window = {"kind": "time", "size_ms": size_ms}
    spec = pipeline_spec(
        unique_topic, tmp_path, window, keyed=True, tasks=tasks, max_offsets_per_trigger=700, allowed_lateness_ms=5000
    )
    events = pipeline_events(3000, seed=1, keys=keys, per_ms=per_ms)
    produce_events(kafka_bootstrap, spec, events)
    in_parquet, in_redis = _run(spark, spec, kafka_bootstrap, redis_url, tmp_path)
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 500
    assert as_multiset(in_parquet) == as_multiset(expected)
    assert as_multiset(in_redis) == as_multiset(expected)


@pytest.mark.slow
def test_band_join_count_window_single_partition(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    tasks = [
        {
            "name": "band",
            "join": ["R", "S"],
            "on": [
                {"op": "band", "left": "R.x", "right": "S.a", "width": 3},
                {"op": "band", "left": "R.y", "right": "S.b", "width": 4.0},
            ],
        }
    ]
    spec = pipeline_spec(unique_topic, tmp_path, {"kind": "count", "size": 300}, keyed=False, tasks=tasks)
    events = pipeline_events(2000, seed=2, keys=5)
    produce_events(kafka_bootstrap, spec, events, topic_partitions=1)
    in_parquet, in_redis = _run(spark, spec, kafka_bootstrap, redis_url, tmp_path)
    # One batch; arrival order inside it is (ts, topic, partition, offset) = the events' order here.
    expected, _ = oracle_join(spec, events)
    assert len(expected) > 100
    assert as_multiset(in_parquet) == as_multiset(expected)
    assert as_multiset(in_redis) == as_multiset(expected)


@pytest.mark.slow
def test_left_outer_and_anti_over_a_count_window_across_runs_and_a_replay(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    """Outer and anti tasks over a count window: a tuple alone comes out once `size` newer tuples of its stream
    have arrived, exactly once, across three runs from one checkpoint, the second's batch failing after its sinks
    wrote and replayed (its windows rebuilt from the state segments, which tuples paired recalled from their
    stored arrival order). Closers (values that pair with nothing) close every tuple of the input; rows of
    closers are left out. One batch per run, so arrival order is (ts, topic, partition, offset) = the events'."""
    band = [{"op": "band", "left": "R.x", "right": "S.a", "width": 1}]
    tasks = [
        {"name": "left", "join": ["R", "S"], "type": "left", "on": band},
        {"name": "anti", "join": ["S", "R"], "type": "anti", "on": [{**band[0], "left": "S.a", "right": "R.x"}]},
    ]
    size = 10
    spec = pipeline_spec(unique_topic, tmp_path, {"kind": "count", "size": size}, keyed=False, tasks=tasks)
    events = pipeline_events(2400, seed=3, keys=5)
    end = events[-1]["ts"]
    closers = [
        {"stream": s, "ts": end + 1 + i, "k": 0, "x": 10_000, "y": 0.0} if s == "R" else
        {"stream": s, "ts": end + 1 + i, "k": 0, "a": -10_000, "b": 0.0}
        for i in range(size) for s in ("R", "S")
    ]  # fmt: skip
    namespace = f"t{uuid.uuid4().hex[:8]}"
    parquet = ParquetSink(tmp_path / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12, namespace=namespace)

    def run(wave: list[dict]) -> None:
        produce_events(kafka_bootstrap, spec, wave, topic_partitions=1)
        query = start_job(spark, parse_spec(spec), kafka_bootstrap, [parquet, redis], available_now=True)
        query.awaitTermination(timeout=600)
        assert query.exception() is None

    run(events[:1200])
    # A few events: most of the first run's open tuples stay open through the replayed batch, so they close in
    # the next run with the flags the replay recalled (the replay's own rows were already committed).
    produce_events(kafka_bootstrap, spec, events[1200:1206], topic_partitions=1)
    run_with_one_replay(
        spark,
        parse_spec(spec),
        kafka_bootstrap,
        [parquet, redis],
        ControlSource(redis_url, namespace),
        after=lambda outcome: None,
        fails=lambda outcome: outcome.batch_id == 1,
    )
    run(events[1206:] + closers)

    def real(rows: list[tuple]) -> list[tuple]:
        return [r for r in rows if all(side is None or abs(side.get("x", side.get("a"))) < 10_000 for side in r[1:])]

    expected, _ = oracle_join(spec, events + closers)
    alone = [r for r in real(expected) if None in r]
    assert len(alone) > 50 and len(real(expected)) > len(alone) + 100
    assert as_multiset(real(parquet_pairs(parquet, spec))) == as_multiset(real(expected))
    assert as_multiset(real(redis_pairs(redis, spec))) == as_multiset(real(expected))
