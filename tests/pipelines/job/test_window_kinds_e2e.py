"""Tumbling and hopping window joins and as-of joins in the running job (real Kafka, Redis, Spark), every result
checked against the brute-force oracles written apart from the operator (tests/support/window_oracle.py with each
result's window, tests/support/asof_oracle.py).

In-process: partitions move between slots while the job runs (the window copies travel with their partition),
the first announce batch fails after its sinks wrote and is replayed after a restart from the checkpoint, and
closers in every partition move the watermark past every window so the outer and anti tasks' rows alone come
out, each once per window. Out of process: `windjoin run` killed with SIGKILL after committed batches, twice,
then drained: Parquet and Redis hold each result exactly once."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest

from tests.pipelines.control_helpers import run_holder_changes
from tests.pipelines.job_processes import kill_job, spark_log, start_run, wait_for_commit
from tests.pipelines.pipeline_helpers import produce_closers, produce_events
from tests.support.asof_oracle import oracle_asof
from tests.support.join_tasks import asof_tasks, windowed_tasks
from tests.support.pipeline_events import pipeline_events, pipeline_spec
from tests.support.redis_rows import redis_rows
from tests.support.window_oracle import as_oracle, oracle_windowed
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.partitioning import RoutingTable

MOVES = {1: RoutingTable(1, (1, 1, 1, 1, 0, 1, 2, 1)), 5: RoutingTable(2, (1, 0, 2, 1, 0, 2, 0, 2))}


def assert_sinks_equal_the_oracle(spec: dict, events: list[dict], parquet: ParquetSink, redis) -> None:
    expected, late = (oracle_asof if "asof" in spec["tasks"][0].get("type", "") else oracle_windowed)(spec, events)
    assert not late and sum(expected.values()) > 300
    from_parquet, from_redis = Counter(), Counter()
    for task in spec["tasks"]:
        from_parquet.update(as_oracle(task, r) for r in parquet.read(task["name"]).to_pylist())
        from_redis.update(as_oracle(task, r) for r in redis_rows(redis, task["name"], 0, 2**53))
    assert from_parquet == expected
    assert from_redis == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("window", "tasks"),
    [
        ({"kind": "hopping", "size_ms": 40, "hop_ms": 10}, windowed_tasks("w")),
        ({"kind": "tumbling", "size_ms": 30, "offset_ms": 7}, windowed_tasks("w")),
        ({"kind": "time", "size_ms": 5}, asof_tasks("w")),
    ],
    ids=["hopping", "tumbling", "asof"],
)
def test_window_joins_through_moves_and_a_replay_equal_the_oracle(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path, window, tasks
):
    spec = pipeline_spec(
        unique_topic,
        tmp_path,
        window,
        keyed=True,
        tasks=tasks,
        max_offsets_per_trigger=250,
        allowed_lateness_ms=5000,
    )
    events = pipeline_events(2400, seed=13, keys=24)
    end = max(e["ts"] for e in events)
    waves = (
        lambda: produce_closers(kafka_bootstrap, spec, end + 100_000, 2, wave=1),
        lambda: produce_closers(kafka_bootstrap, spec, end + 200_000, 2, wave=2),
    )
    seen, parquet, redis = run_holder_changes(
        spark, spec, events, kafka_bootstrap, redis_url, tmp_path, MOVES, "moved_out", waves
    )
    assert {p for o in seen for s in o.stats for p in s["moved_in"]} == {0, 1, 2, 5, 6, 7}
    assert_sinks_equal_the_oracle(spec, events, parquet, redis)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("window", "tasks", "lateness_ms"),
    [
        ({"kind": "hopping", "size_ms": 40, "hop_ms": 20}, windowed_tasks, 5000),
        ({"kind": "time", "size_ms": 5}, asof_tasks, 0),
    ],
    ids=["hopping", "asof"],
)
def test_window_and_as_of_joins_are_exact_across_kill_9_of_the_whole_job(
    kafka_bootstrap, redis_url, unique_topic, tmp_path, window, tasks, lateness_ms
):
    """The job killed twice after committed batches, then drained. As-of tasks run at allowed lateness 0: every
    segment expires the batch after it came, so their versions live on in cut-down segments across the restarts."""
    checkpoint = tmp_path / "checkpoint"
    prefix = f"k{uuid.uuid4().hex[:8]}_"  # unique task names: the CLI's Redis sink writes the shared namespace
    spec = pipeline_spec(
        unique_topic,
        tmp_path,
        window,
        keyed=True,
        tasks=tasks(prefix),
        max_offsets_per_trigger=200,
        allowed_lateness_ms=lateness_ms,
        trigger_ms=200,
    )
    spec["sinks"] = {"parquet": {"path": str(tmp_path / "parquet")}, "redis": {"url": redis_url, "retain_ms": 10**12}}
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML
    events = pipeline_events(2400, seed=17, keys=24)
    produce_events(kafka_bootstrap, spec, events)
    end = max(e["ts"] for e in events)
    with (tmp_path / "runs.log").open("ab") as log:
        for kill in range(2):  # killed after 1, then 2 more committed batches
            proc = start_run(spec_path, kafka_bootstrap, log)
            first = spark_log(checkpoint, "commits")
            deadline = time.monotonic() + 180
            wait_for_commit(proc, checkpoint, first + kill, deadline)
            kill_job(proc)
        for wave in (1, 2):  # drain with closers, then one more run plans a batch past the first closers' watermark
            produce_closers(kafka_bootstrap, spec, end + wave * 100_000, 2, wave=wave)
            proc = start_run(spec_path, kafka_bootstrap, log, "--available-now")
            assert proc.wait(timeout=300) == 0, (tmp_path / "runs.log").read_text()[-3000:]
    parquet = ParquetSink(tmp_path / "parquet")
    redis = RedisSink(redis_url, retain_ms=10**12)
    assert_sinks_equal_the_oracle(spec, events, parquet, redis)
