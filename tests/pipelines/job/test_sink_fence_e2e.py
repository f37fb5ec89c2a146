"""A new checkpoint over sinks another checkpoint wrote, on the real pipeline (Kafka → Spark → Parquet, Redis,
snapshots from `build_sinks`): refused before Spark starts, naming the sinks and both checkpoints; with fresh sinks
the new run's results equal the brute-force oracle over its own input. And `windjoin run` refuses in one line.

Without the fence the new checkpoint's batch ids (0, 1, ...) are at or below the old run's last one, and both
sinks took them for replays: the new run's results never arrived.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.pipelines.pipeline_helpers import (
    parquet_pairs,
    produce_events,
    punctuated_events,
    punctuated_spec,
    redis_pairs,
)
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.keys import task_prefix
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.result_table import result_schema
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.cli.run import run
from windjoin.pipelines.job.checkpoint_identity import checkpoint_identity
from windjoin.pipelines.job.join_job import BatchOutcome, start_job
from windjoin.pipelines.job.sink_fence import SinkOwnerError, fence_sinks
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000


def _run(spark, spec_dict: dict, bootstrap: str, fresh_sinks: bool = False) -> list[BatchOutcome]:
    spec = parse_spec(spec_dict)
    outcomes: list[BatchOutcome] = []
    sinks = build_sinks(spec)
    try:
        query = start_job(spark, spec, bootstrap, sinks, True, outcomes.append, fresh_sinks=fresh_sinks)
        query.awaitTermination(timeout=600)
        assert query.exception() is None
    finally:
        sinks[1].close()
    return outcomes


@pytest.mark.slow
def test_a_new_checkpoint_is_refused_and_fresh_sinks_equal_the_oracle(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    tasks = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]  # Redis keys of this test only
    first = punctuated_spec(tasks, unique_topic, tmp_path, redis_url, retain_ms=10**12)
    first["checkpoint"] = str(tmp_path / "checkpoint-a")
    first_events = punctuated_events(700, {300}, seed=4, base_ts=BASE_TS)
    produce_events(kafka_bootstrap, first, first_events, topic_partitions=1)
    first_outcomes = _run(spark, first, kafka_bootstrap)
    last_first = max(o.batch_id for o in first_outcomes)
    assert last_first >= 3

    # The new run: a new checkpoint (as after a layout change), new input, the same sinks and tasks.
    second = copy.deepcopy(first)
    second["checkpoint"] = str(tmp_path / "checkpoint-b")
    for name, stream in second["streams"].items():
        stream["topic"] = unique_topic(f"{name.lower()}2")
    second_events = punctuated_events(450, {200}, seed=5, base_ts=BASE_TS + 10_000)
    produce_events(kafka_bootstrap, second, second_events, topic_partitions=1)
    spec = parse_spec(second)
    sinks = build_sinks(spec)
    with pytest.raises(SinkOwnerError) as refused:
        start_job(spark, spec, kafka_bootstrap, sinks, True)
    sinks[1].close()
    message = str(refused.value)
    parquet = ParquetSink(tmp_path / "parquet")
    a = checkpoint_identity(Path(first["checkpoint"]).resolve())
    b = checkpoint_identity(Path(second["checkpoint"]).resolve())
    for task in tasks:
        assert str(parquet.task_dir(task)) in message
        assert f"keys {task_prefix(task)}*" in message
    assert f"written by checkpoint {a.describe()}" in message
    assert f"this job's checkpoint is {b.describe()}" in message
    assert not spark.streams.active and not (Path(second["checkpoint"]) / "offsets").exists()  # Spark never started
    first_ordinary = [e for i, e in enumerate(first_events) if i != 300]  # the punctuation is not joined
    assert as_multiset(parquet_pairs(parquet, first)) == as_multiset(oracle_join(first, first_ordinary)[0])

    outcomes = _run(spark, second, kafka_bootstrap, fresh_sinks=True)
    assert max(o.batch_id for o in outcomes) <= last_first  # every batch id was one the old run had committed
    assert not any(o.replayed for o in outcomes)
    ordinary = [e for i, e in enumerate(second_events) if i != 200]
    expected, late = oracle_join(second, ordinary)
    assert not late and len(expected) > 150
    with RedisSink(redis_url, 10**12) as redis_sink:
        try:
            assert as_multiset(parquet_pairs(parquet, second)) == as_multiset(expected)
            assert as_multiset(redis_pairs(redis_sink, second)) == as_multiset(expected)
            assert [redis_sink.owner(t) for t in tasks] == [b, b] == [parquet.owner(t) for t in tasks]
            # Snapshots start over with the new run's batches (the old manifests went with the old results).
            punctuated = sorted(o.batch_id for o in outcomes if o.punctuations)
            for task in tasks:
                assert [(s.first_batch, s.last_batch) for s in SnapshotStore(parquet.files.root).list(task)] == [
                    (0, punctuated[0])
                ]
        finally:
            for task in tasks:
                redis_sink.clear(task)


def test_windjoin_run_refuses_in_one_line_before_spark_starts(redis_url, unique_topic, tmp_path):
    tasks = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]
    spec_dict = punctuated_spec(tasks, unique_topic, tmp_path, redis_url, retain_ms=10**12)
    other = checkpoint_identity(tmp_path / "other-checkpoint")
    sinks = build_sinks(parse_spec(spec_dict))
    fence_sinks(sinks, tasks, other, fresh=False)
    parquet = sinks[0]
    parquet.write(0, {t: result_schema(parse_spec(spec_dict), t).empty_table() for t in tasks})  # its batch 0
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec_dict))
    result = CliRunner().invoke(run, [str(spec_path), "--bootstrap", "127.0.0.1:1"])
    sinks[1].close()
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: sinks hold results of another checkpoint: "), lines
    assert f"written by checkpoint {other.describe()}" in lines[0]
    assert f"this job's checkpoint is {tmp_path / 'checkpoint'} (run " in lines[0]
    assert "--fresh-sinks" in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "checkpoint" / "offsets").exists()
