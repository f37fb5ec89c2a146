"""`windjoin.spark.join_stream` over a user's own file-source streaming DataFrames, written by Spark's file sink:
every window kind and join type against the brute-force oracles written apart from the operators, refused input
as dead-letter rows, and clear errors for inputs that do not fit the spec."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.frames.frame_files import (
    append_stream_file,
    file_inputs,
    output_rows,
    stream_ddl,
    write_stream_files,
)
from tests.pipelines.job_processes import kill_job, spark_log, wait_for_commit
from tests.support.asof_oracle import joined_asof, oracle_asof
from tests.support.join_tasks import EQ, asof_tasks, windowed_tasks
from tests.support.pipeline_events import pipeline_events
from tests.support.window_oracle import as_oracle, oracle_windowed
from windjoin import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.frames.frame_inputs import FrameInputError
from windjoin.spark import join_stream

BAND = [*EQ, {"op": "band", "left": "R.x", "right": "S.a", "width": 10}]
TIME_TASKS = [
    {"name": "band", "join": ["R", "S"], "on": BAND},
    {
        "name": "far",
        "join": ["S", "R"],
        "on": [
            {"op": "eq", "left": "S.k", "right": "R.k"},
            {"op": "outside", "left": "S.b", "right": "R.y", "width": 20},
        ],
    },
    {"name": "left", "join": ["R", "S"], "type": "left", "on": EQ},
    {"name": "full", "join": ["R", "S"], "type": "full", "on": BAND},
    {"name": "semi", "join": ["S", "R"], "type": "semi", "on": EQ},
    {"name": "anti", "join": ["S", "R"], "type": "anti", "on": EQ},
]


def frame_spec(window: dict, tasks: list[dict], lateness_ms: int = 50) -> dict:
    """Streams keyed by `k` (8 partitions on 2 slots), but a count window's: it numbers every arrival of a stream,
    so its streams stay whole (one partition)."""
    spec = {
        "window": window,
        "allowed_lateness_ms": lateness_ms,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int", "y": "float"}, "key": "k"},
            "S": {"fields": {"k": "int", "a": "int", "b": "float"}, "key": "k"},
        },
        "tasks": tasks,
        "partitions": 8,
        "slots": 2,
    }
    if window["kind"] == "count":
        for stream in spec["streams"].values():
            del stream["key"]
    return spec


def closers(end: int) -> list[dict]:
    """One event per stream far past the rest, each with a key of its own (it pairs with nothing): the batch after
    it has a watermark past every earlier window, so outer, anti and as-of rows come out."""
    return [
        {"stream": "R", "ts": end + 100_000, "k": -1, "x": 0, "y": 0.0},
        {"stream": "S", "ts": end + 100_000, "k": -2, "a": 0, "b": 0.0},
    ]


def run_join(spark, spec: dict, events: list[dict], root: Path, files: int = 4, extra: list[dict] = ()) -> list[dict]:
    """`join_stream` over the events' files (then `extra` in a last file), to the end, through the file sink."""
    write_stream_files(root / "in", spec, events, files)
    if extra:
        append_stream_file(root / "in", spec, list(extra), "9999")
    query = (
        join_stream(parse_spec(spec), file_inputs(spark, spec, root / "in"))
        .writeStream.format("parquet")
        .option("path", str(root / "out"))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300), "join_stream's AvailableNow query did not finish within 300 s"
    finally:
        query.stop()
    return output_rows(spark, root / "out")


def results(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["task"] is not None]


def pairs_multiset(spec: dict, rows: list[dict]) -> Counter:
    """Result rows as the 2-way oracle's multiset: (task, first stream's tuple, second's), in `join` order."""
    tasks = {t["name"]: t["join"] for t in spec["tasks"]}
    return as_multiset([(r["task"], *(r[s] for s in tasks[r["task"]])) for r in rows])


@pytest.mark.parametrize(
    ("window", "tasks"),
    [({"kind": "time", "size_ms": 40}, TIME_TASKS), ({"kind": "count", "size": 30}, TIME_TASKS[:2])],
    ids=["time", "count"],
)
def test_time_and_count_window_tasks_equal_the_oracle(spark, tmp_path, window, tasks):
    spec = frame_spec(window, tasks)
    events = pipeline_events(1600, seed=3, keys=12)
    rows = run_join(spark, spec, events, tmp_path, extra=closers(events[-1]["ts"]) if window["kind"] == "time" else ())
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 500
    assert not [r for r in rows if r["dead_letter"] is not None]
    got = pairs_multiset(spec, results(rows))
    assert got == as_multiset(expected)
    assert {r["task"] for r in rows} == {t["name"] for t in tasks}
    assert all(r["result_time"] == max(r[s]["ts"] for s in "RS" if r[s] is not None) for r in results(rows))


@pytest.mark.parametrize(
    "window",
    [{"kind": "tumbling", "size_ms": 30, "offset_ms": 7}, {"kind": "hopping", "size_ms": 40, "hop_ms": 20}],
    ids=["tumbling", "hopping"],
)
def test_tumbling_and_hopping_window_tasks_equal_the_oracle(spark, tmp_path, window):
    spec = frame_spec(window, windowed_tasks(""))
    events = pipeline_events(1600, seed=5, keys=12)
    rows = run_join(spark, spec, events, tmp_path, extra=closers(events[-1]["ts"]))
    expected, late = oracle_windowed(spec, events)
    assert not late and sum(expected.values()) > 300
    tasks = {t["name"]: t for t in spec["tasks"]}
    got = Counter(as_oracle(tasks[r["task"]], r) for r in results(rows))
    assert got == expected
    assert all(r["window_end"] - r["window_start"] == window["size_ms"] for r in results(rows))


def test_as_of_tasks_equal_the_oracle(spark, tmp_path):
    spec = frame_spec({"kind": "time", "size_ms": 5}, asof_tasks(""), lateness_ms=0)
    events = pipeline_events(1600, seed=7, keys=12)
    rows = run_join(spark, spec, events, tmp_path, extra=closers(events[-1]["ts"]))
    expected, late = oracle_asof(spec, events)
    assert not late and sum(expected.values()) > 300
    assert joined_asof(spec, results(rows)) == expected


def test_late_and_invalid_rows_come_out_as_dead_letters_with_their_reason(spark, tmp_path):
    spec = frame_spec({"kind": "time", "size_ms": 40}, TIME_TASKS[:1])
    events = pipeline_events(800, seed=9, keys=12)
    late = {"stream": "R", "ts": events[0]["ts"] - 1000, "k": 1, "x": 1, "y": 1.0}
    invalid = {"stream": "S", "ts": events[-1]["ts"], "k": None, "a": 1, "b": 2.0}
    rows = run_join(spark, spec, events, tmp_path, extra=[late, invalid])
    dead = sorted((r for r in rows if r["dead_letter"] is not None), key=lambda r: r["dead_letter"]["reason"])
    assert [(r["dead_letter"]["stream"], r["dead_letter"]["reason"]) for r in dead] == [
        ("R", "late"),
        ("S", "missing_field"),
    ]
    assert dead[0]["R"] == {"ts": late["ts"], "k": 1, "x": 1, "y": 1.0} and dead[0]["task"] is None
    assert "watermark" in dead[0]["dead_letter"]["detail"]
    assert "'k' is null" in dead[1]["dead_letter"]["detail"] and dead[1]["S"] is None
    expected, _ = oracle_join(spec, events)
    assert pairs_multiset(spec, results(rows)) == as_multiset(expected)


def test_inputs_that_do_not_fit_the_spec_are_refused_naming_the_stream_and_field(spark, tmp_path):
    spec = parse_spec(frame_spec({"kind": "time", "size_ms": 40}, TIME_TASKS[:1]))
    folder = str(tmp_path)
    good_r = spark.readStream.schema("ts bigint, k bigint, x int, y double").json(folder)
    good_s = spark.readStream.schema("ts timestamp, k bigint, a bigint, b float").json(folder)
    join_stream(spec, {"R": good_r, "S": good_s})  # integer widths and a Spark timestamp are taken
    with pytest.raises(FrameInputError, match=r"missing \['S'\]"):
        join_stream(spec, {"R": good_r})
    with pytest.raises(FrameInputError, match=r"inputs\['R'\]: not a streaming DataFrame"):
        join_stream(spec, {"R": spark.range(3), "S": good_s})
    no_x = spark.readStream.schema("ts bigint, k bigint, y double").json(folder)
    with pytest.raises(FrameInputError, match=r"inputs\['R'\]: field 'x' \(streams.R.fields.x: int\) is missing"):
        join_stream(spec, {"R": no_x, "S": good_s})
    text_k = spark.readStream.schema("ts bigint, k string, a bigint, b double").json(folder)
    with pytest.raises(FrameInputError, match=r"field 'k' .* is of type string; accepted Spark types: byte"):
        join_stream(spec, {"R": good_r, "S": text_k})
    text_ts = spark.readStream.schema("ts string, k bigint, a bigint, b double").json(folder)
    with pytest.raises(FrameInputError, match=r"timestamp column 'ts' \(streams.S.timestamp\) is of type string"):
        join_stream(spec, {"R": good_r, "S": text_ts})


@pytest.mark.slow
def test_results_equal_the_oracle_across_kill_9_and_restarts_on_the_same_checkpoint(spark, tmp_path):
    """A user's job around join_stream (its own process) killed with SIGKILL twice, each time at a random moment
    after 1-3 more batches committed, restarted on the same checkpoint, then drained: Spark's file sink holds
    each result once."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    spec = frame_spec({"kind": "time", "size_ms": 40}, TIME_TASKS)
    events = pipeline_events(2400, seed=11, keys=12)
    write_stream_files(tmp_path / "in", spec, events, files=12)
    append_stream_file(tmp_path / "in", spec, closers(events[-1]["ts"]), "9999")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    command = [sys.executable, "-m", "tests.pipelines.frames.frame_job", str(tmp_path / "spec.json")]
    command += [str(tmp_path / d) for d in ("in", "out", "checkpoint")]
    checkpoint = tmp_path / "checkpoint"
    with (tmp_path / "runs.log").open("ab") as log:
        for _ in range(2):
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            wait_for_commit(
                proc, checkpoint, spark_log(checkpoint, "commits") + rng.randint(0, 2), time.monotonic() + 240
            )
            time.sleep(rng.uniform(0, 1.5))
            kill_job(proc)
        drain = subprocess.run([*command, "--available-now"], stdout=log, stderr=subprocess.STDOUT, timeout=300)
    assert drain.returncode == 0, (tmp_path / "runs.log").read_text()[-3000:]
    rows = output_rows(spark, tmp_path / "out")
    expected, late = oracle_join(spec, events)
    assert not late
    assert pairs_multiset(spec, results(rows)) == as_multiset(expected), f"seed {seed}"
    assert not [r for r in rows if r["dead_letter"] is not None], f"seed {seed}"


def test_over_sparks_own_kafka_source_the_results_equal_the_oracle(
    spark, apache_kafka_bootstrap, unique_topic, tmp_path
):
    """What a Spark team has on its cluster: its streams read by Spark's Kafka source (spark-sql-kafka-0-10) from
    Apache Kafka, parsed with from_json, joined by join_stream, written by Spark's file sink. Spark's watermark
    follows a DataFrame's newest row over all its partitions (docs/streaming.md), and Spark's source reads the
    partitions each by its share of a batch's offsets, so apart in event time by chance: the lateness (1 s)
    covers that, as a user's must."""
    from pyspark.sql import functions as F

    from tests.pipelines.pipeline_helpers import produce_events

    spec = frame_spec({"kind": "time", "size_ms": 40}, [TIME_TASKS[0], TIME_TASKS[2]], 1000)  # band, left outer
    events = pipeline_events(1600, seed=13, keys=12)
    for name in spec["streams"]:
        spec["streams"][name]["topic"] = unique_topic(name)
    produce_events(apache_kafka_bootstrap, spec, [*events, *closers(events[-1]["ts"])], topic_partitions=3)

    def read(name: str) -> Any:
        raw = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", apache_kafka_bootstrap)
            .option("subscribe", spec["streams"][name]["topic"])
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 400)
            .load()
        )
        return raw.select(F.from_json(F.col("value").cast("string"), stream_ddl(spec, name)).alias("v")).select("v.*")

    query = (
        join_stream(parse_spec(spec), {name: read(name) for name in spec["streams"]})
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300), "the query over Spark's Kafka source did not finish within 300 s"
    finally:
        query.stop()
    rows = output_rows(spark, tmp_path / "out")
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 300
    assert not [r for r in rows if r["dead_letter"] is not None]
    assert pairs_multiset(spec, results(rows)) == as_multiset(expected)
