"""The streaming job end to end on real services: Kafka (embedded broker) → Spark → Parquet and Redis.

Results in both sinks must equal the brute-force oracle on the same events, as multisets.
"""

from __future__ import annotations

import random
import uuid

import pytest

from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events, redis_pairs
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.redis_sink import RedisSink
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job


def _spec(unique_topic, tmp_path, window: dict, keyed: bool, tasks: list[dict], **extra) -> dict:
    r_fields, s_fields = {"k": "int", "x": "int", "y": "float"}, {"k": "int", "a": "int", "b": "float"}
    spec = {
        "window": window,
        "streams": {
            "R": {"fields": r_fields, "topic": unique_topic("r")},
            "S": {"fields": s_fields, "topic": unique_topic("s")},
        },
        "tasks": tasks,
        "partitions": 8,
        "slots": 2,
        "checkpoint": str(tmp_path / "checkpoint"),
        **extra,
    }
    if keyed:
        spec["streams"]["R"]["key"] = spec["streams"]["S"]["key"] = "k"
    return spec


def _events(n: int, seed: int, keys: int, per_ms: int = 1) -> list[dict]:
    """`n` events of R or S at random, `per_ms` of them at each millisecond in turn."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.5:
            out.append(
                {
                    "stream": "R",
                    "ts": 1_700_000_000_000 + i // per_ms,
                    "k": rng.randrange(keys),
                    "x": rng.randrange(50),
                    "y": rng.uniform(0, 50),
                }
            )
        else:
            out.append(
                {
                    "stream": "S",
                    "ts": 1_700_000_000_000 + i // per_ms,
                    "k": rng.randrange(keys),
                    "a": rng.randrange(50),
                    "b": rng.uniform(0, 50),
                }
            )
    return out


def _run(spark, spec_dict: dict, bootstrap: str, redis_url: str, tmp_path) -> tuple[list, list]:
    spec = parse_spec(spec_dict)
    parquet = ParquetSink(tmp_path / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12, namespace=f"t{uuid.uuid4().hex[:8]}")
    query = start_job(spark, spec, bootstrap, [parquet, redis], available_now=True)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
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
    spec = _spec(
        unique_topic, tmp_path, window, keyed=True, tasks=tasks, max_offsets_per_trigger=700, allowed_lateness_ms=5000
    )
    events = _events(3000, seed=1, keys=keys, per_ms=per_ms)
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
    spec = _spec(unique_topic, tmp_path, {"kind": "count", "size": 300}, keyed=False, tasks=tasks)
    events = _events(2000, seed=2, keys=5)
    produce_events(kafka_bootstrap, spec, events, topic_partitions=1)
    in_parquet, in_redis = _run(spark, spec, kafka_bootstrap, redis_url, tmp_path)
    # One batch; arrival order inside it is (ts, topic, partition, offset) = the events' order here.
    expected, _ = oracle_join(spec, events)
    assert len(expected) > 100
    assert as_multiset(in_parquet) == as_multiset(expected)
    assert as_multiset(in_redis) == as_multiset(expected)
