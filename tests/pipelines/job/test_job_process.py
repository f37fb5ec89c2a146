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


class _Session:
    """Stands for a SparkSession in a start that fails before it is used (no JVM)."""

    sparkContext = None  # noqa: N815 - SparkSession's name

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("caller_session", [False, True])
def test_a_start_that_fails_after_spark_stops_the_session_it_built_only(monkeypatch, tmp_path, caller_session):
    spec = parse_spec(
        {
            **SPEC,
            "streams": {name: {**s, "topic": name.lower()} for name, s in SPEC["streams"].items()},
            "checkpoint": str(tmp_path / "checkpoint"),
        }
    )
    session = _Session()
    monkeypatch.setattr("windjoin.connectors.spark.session.build_local_spark", lambda **_: session)

    def broken_start(*_args, **_kwargs):
        raise RuntimeError("the query did not start")

    monkeypatch.setattr("windjoin.pipelines.job.job_process.start_query", broken_start)
    with pytest.raises(RuntimeError, match="did not start"):
        start_job_process(spec, "127.0.0.1:1", spark=session if caller_session else None)
    assert session.stopped is not caller_session  # the caller's session is the caller's to stop
