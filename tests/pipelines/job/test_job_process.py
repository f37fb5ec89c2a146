"""The job's process assembly refuses what it cannot run before any Spark starts (no JVM in these tests)."""

from __future__ import annotations

import pytest

from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job.job_process import JobProcessOptions, start_job_process
from windjoin.pipelines.job.join_job import JobConfigError

SPEC = {
    "window": {"kind": "time", "size_ms": 1000},
    "streams": {"R": {"fields": {"k": "int"}, "key": "k"}, "S": {"fields": {"k": "int"}, "key": "k"}},
    "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}


def test_executor_scaling_needs_a_cluster_master():
    with pytest.raises(JobConfigError, match="need a cluster spark_master, got local"):
        JobProcessOptions(executors=2)
    with pytest.raises(JobConfigError, match="executors_from_redis"):
        JobProcessOptions(executors_from_redis="redis://r:6379/0")
    assert JobProcessOptions(executors=2, spark_master="spark://m:7077").executors == 2


def test_a_spec_without_topics_or_checkpoint_is_refused_before_spark_starts(monkeypatch):
    def no_spark(**_):
        raise AssertionError("Spark was started before the checks")

    monkeypatch.setattr("windjoin.connectors.spark.session.build_local_spark", no_spark)
    said: list[str] = []
    with pytest.raises(JobConfigError) as refused:
        start_job_process(parse_spec(SPEC), "127.0.0.1:1", say=said.append)
    assert "streams.R.topic" in str(refused.value) and "checkpoint" in str(refused.value)
    assert said == []
