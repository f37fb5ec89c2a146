"""The Spark job writes its results to an S3-compatible server (moto, `tests/s3_server.py`), is killed with
SIGKILL inside the driver's commit there, and after a restart the results in the bucket, read by the sink and
served by the proxy, equal the brute-force oracle's pairs: none lost, none twice, no commit left half done.

On an object store a commit copies the batch's pieces into its folder, then writes the marker that publishes it
(`connectors/files/result_files.py`). The test watches the bucket and freezes the job (SIGSTOP) as soon as a batch
folder appears without its marker; if the marker is still missing then, the commit is under way and the job is
killed; otherwise it is thawed and the next batch is tried. The Spark checkpoint stays local (an `s3a://`
checkpoint needs Hadoop's AWS jars, which this machine cannot fetch).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.pipelines.job_processes import (
    freeze_job,
    kill_job,
    session_members,
    spark_log,
    start_run,
    thaw_job,
    wait_for_commit,
)
from tests.pipelines.pipeline_helpers import parquet_pairs
from tests.pipelines.proxy_helpers import AUTH, access, fetch_all
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.proxy.app import create_app

BASE_TS = 1_700_000_000_000
EVENTS = 6_000
KEYS = 30
RUN_TIMEOUT_S = 180


def _events(seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"stream": rng.choice("RS"), "ts": BASE_TS + 20 * i, "k": rng.randrange(KEYS), "v": rng.randrange(1000)}
        for i in range(EVENTS)
    ]


def _produce(bootstrap: str, spec: dict, events: list[dict]) -> None:
    with BatchProducer(bootstrap) as producer:
        for name, stream in spec["streams"].items():
            records = [
                (str(e["k"]).encode(), json.dumps({"ts": e["ts"], "k": e["k"], "v": e["v"]}), e["ts"])
                for e in events
                if e["stream"] == name
            ]
            producer.produce_batch(stream["topic"], records)


def _unpublished(sink: ParquetSink, task: str) -> list[str]:
    """Batch folders of `task` in the bucket without their commit marker: a commit under way (or left halfway)."""
    task_dir = sink.task_dir(task)
    folders = {name for name in sink.files.names(task_dir) if name.startswith("batch=")}
    return sorted(folders - set(sink.files.published_names(task_dir)))


def _kill_in_commit(proc, sink: ParquetSink, task: str, deadline: float) -> str:
    """Freeze the job on sight of a batch folder without its marker; kill it if the marker is still missing."""
    tries = 0
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a commit could be hit"
        if _unpublished(sink, task):
            freeze_job(proc)
            caught = _unpublished(sink, task)
            if caught:
                kill_job(proc)
                return f"killed committing {caught} after {tries} missed commit(s)"
            thaw_job(proc)
            tries += 1
        time.sleep(0.001)
    raise AssertionError("no commit was caught under way before the deadline")


@pytest.mark.slow
def test_results_in_the_bucket_equal_the_oracle_across_kill_9_in_a_commit(
    kafka_bootstrap, unique_topic, s3_bucket, tmp_path: Path
):
    seed = random.randrange(2**31)
    task = f"s3_{uuid.uuid4().hex[:8]}"
    url = f"{s3_bucket}/results"
    checkpoint = tmp_path / "checkpoint"
    spec = {
        "window": {"kind": "time", "size_ms": 400},
        "streams": {
            "R": {"fields": {"k": "int", "v": "int"}, "topic": unique_topic("r"), "key": "k"},
            "S": {"fields": {"k": "int", "v": "int"}, "topic": unique_topic("s"), "key": "k"},
        },
        "tasks": [{"name": task, "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 8,
        "slots": 2,
        "trigger_ms": 100,
        "max_offsets_per_trigger": 150,
        "checkpoint": str(checkpoint),
        "dead_letter_topic": unique_topic("dead"),
        "sinks": {"parquet": {"path": url}},
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    create_topics(kafka_bootstrap, [s["topic"] for s in spec["streams"].values()], 2)
    create_topics(kafka_bootstrap, [spec["dead_letter_topic"]], 1)
    events = _events(seed)
    _produce(kafka_bootstrap, spec, events)

    sink = ParquetSink(url)
    log_path = tmp_path / "runs.log"
    info = f"seed {seed}; log {log_path}"
    procs = []
    try:
        with log_path.open("ab") as log:
            proc = start_run(spec_path, kafka_bootstrap, log)
            procs.append(proc)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            wait_for_commit(proc, checkpoint, -1, deadline)
            hit = _kill_in_commit(proc, sink, task, deadline)
            planned, done = spark_log(checkpoint, "offsets"), spark_log(checkpoint, "commits")
            info = f"{info}; {hit}; Spark planned {planned}, done {done}"
            assert planned > done, info  # the batch caught in its commit is replayed
            proc = start_run(spec_path, kafka_bootstrap, log, "--available-now")
            procs.append(proc)
            assert proc.wait(timeout=RUN_TIMEOUT_S) == 0, f"the final run failed; {info}"

        expected, late = oracle_join(spec, sorted(events, key=lambda e: e["ts"]))
        assert not late and len(expected) > 1000, info
        fresh = ParquetSink(url)
        got = as_multiset(parquet_pairs(fresh, spec))
        want = as_multiset(expected)
        lost, extra = sum((want - got).values()), sum((got - want).values())
        assert got == want, f"{lost} lost, {extra} duplicated or wrong of {len(expected)}; {info}"
        assert fresh.last_committed(task) == spark_log(checkpoint, "commits"), info
        assert not _unpublished(fresh, task), info
        hidden = [name for name in fresh.files.names(fresh.task_dir(task)) if name.startswith(".")]
        assert not hidden, f"pending folders left: {hidden}; {info}"

        # The proxy answers from the bucket: every pair, as the oracle has it.
        store = ResultStore(parse_spec(spec), None, "unused", url, parquet_tail=True)
        with TestClient(headers=AUTH, app=create_app(store, access=access())) as client:
            rows = fetch_all(
                client, task, {"from": BASE_TS - 60_000, "to": BASE_TS + 20 * EVENTS + 60_000, "limit": 1000}
            )
        served = as_multiset([(task, row["R"], row["S"]) for row in rows])
        assert served == want, f"the proxy served {sum(served.values())} rows of {len(expected)}; {info}"
        print(f"{len(events)} events, {len(expected)} pairs; {info}")
    finally:
        for proc in procs:
            if proc.poll() is None or session_members(proc.pid):
                kill_job(proc)
