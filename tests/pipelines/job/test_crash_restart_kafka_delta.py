"""Exactly once into a Kafka topic and a Delta table across `kill -9` of the whole job, inside both sinks' work.

The harness of `test_crash_restart` (the real `windjoin run` in its own session, a paced producer writing the
whole time, restarts from the same checkpoint, two final `--available-now` runs with closers), on Apache Kafka
(Tansu keeps no transactions), with two sinks: `sinks.kafka` (one transaction per slot's piece, the driver's
ledger) and `sinks.delta` (piece files, the driver's one commit per batch). The job is killed once per entry of
KILLS, in a shuffled order, each after 1-3 new batches:

- `kafka_stage`: frozen as soon as a slot's transaction wrote a piece of a batch the driver has not committed to
  Kafka (the piece visible to read_committed readers, the batch to be replayed); killed if it still has not.
- `delta_stage`: frozen as soon as a piece file of a batch the Delta log lacks exists (the slots staging it);
  killed if the log still lacks the batch.
- `delta_commit`: frozen as soon as every slot's piece of such a batch exists (the driver's Delta commit under
  way: footers read, the log entry written); killed if the log still lacks the batch.
- `after_sinks`: frozen as soon as the Kafka ledger (committed after Delta) holds a new batch, killed if Spark's
  commit log lacks it: both sinks hold a batch Spark will replay.
- `random`: up to a second after a commit, anywhere.

Then a read_committed reader of the results topic, and the table read by DuckDB over the log's JSON commits
(`tests/support/delta_reader`, no delta-rs) and by polars, must each equal the brute-force oracle as a multiset;
each batch Spark committed is one table version (the versions' application transactions are 0, 1, 2, ... once
each, the last one Spark's), both sinks' last commit is Spark's, and the job logged each replay it skipped, per
sink. Set WINDJOIN_EO_SEED to replay a schedule.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
import polars as pl
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.pipelines.job.test_crash_restart import TOPIC_PARTITIONS, PacedProducer, _crash_spec, _kill_at_random
from tests.pipelines.job_processes import (
    freeze_job,
    kill_job,
    session_members,
    spark_log,
    start_run,
    thaw_job,
    wait_for_commit,
)
from tests.pipelines.pipeline_helpers import produce_closers, read_dead_letters
from tests.support.delta_reader import read_log, read_rows
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.results_sink import TASK_HEADER, KafkaResultsSink
from windjoin.operators.testing.oracle import as_multiset, oracle_join

KILLS = ("kafka_stage", "delta_stage", "delta_commit", "after_sinks", "random")
RUN_TIMEOUT_S = 120
SLOTS = 2
RESULT_PARTITIONS = 3
VERSION = re.compile(r"([0-9]{20})\.json")
PIECE = re.compile(r"batch-([0-9]+)-part-([0-9]+)-[0-9a-f-]+\.parquet")


def _kill_in_kafka_stage(proc: subprocess.Popen, sink: KafkaResultsSink, task: str, deadline: float) -> str:
    """Kill the job while the slots stage a batch into Kafka: frozen as soon as a piece of a batch the driver has
    not committed is written (its transaction committed, so read_committed readers see it), killed if the driver
    still has not committed that batch. Returns what was hit."""
    misses = 0
    while True:
        ledger = sink.last_committed(task)
        ledger = -1 if ledger is None else ledger
        ahead = {piece: batch for piece, batch in sink.written(task).items() if batch > ledger}
        if ahead:
            freeze_job(proc)
            batch = max(ahead.values())
            committed = sink.last_committed(task)
            if committed is None or committed < batch:
                kill_job(proc)
                return f"kafka_stage hit: pieces {ahead} written, the driver at {ledger}, after {misses} misses"
            thaw_job(proc)
            misses += 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a Kafka stage was hit"
        assert time.monotonic() < deadline, f"no Kafka stage hit in time ({misses} misses)"
        time.sleep(0.002)


def kafka_pairs(bootstrap: str, topic: str, spec: dict, partitions: int) -> list[tuple]:
    """(task, left, right) of every record a read_committed reader gets from the results topic (task from the
    header), read from the start to the partitions' ends."""
    joins = {task["name"]: task["join"] for task in spec["tasks"]}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}", "isolation.level": "read_committed"}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + 120
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end):
            assert time.monotonic() < deadline, f"results topic not read to {ends} in time"
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            task = dict(message.headers())[TASK_HEADER].decode()
            row, (left, right) = json.loads(message.value()), joins[task]
            out.append((task, row[left], row[right]))
        return out
    finally:
        consumer.close()


def _kill_after_sinks(
    proc: subprocess.Popen, sink: KafkaResultsSink, task: str, checkpoint: Path, deadline: float
) -> str:
    """Kill the job once the Kafka sink, the last to commit, committed a batch that Spark has not (Delta's log
    holds it before). Returns what was hit."""
    seen, misses = sink.last_committed(task), 0
    seen = -1 if seen is None else seen
    while True:
        batch = sink.last_committed(task)
        if batch is not None and batch > seen:
            freeze_job(proc)
            if not (checkpoint / "commits" / str(batch)).exists():
                kill_job(proc)
                return f"after_sinks hit: batch {batch} in both sinks, not in Spark's commits, after {misses} misses"
            thaw_job(proc)
            seen, misses = batch, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a commit gap was hit"
        assert time.monotonic() < deadline, f"no commit gap hit in time ({misses} misses)"
        time.sleep(0.002)


def _logged_batch(table: Path) -> int:
    """The batch id of the newest log entry carrying an application transaction (a batch's commit); -1 if none."""
    try:
        versions = sorted(m.group(1) for n in os.listdir(table / "_delta_log") if (m := VERSION.fullmatch(n)))
    except FileNotFoundError:
        return -1
    for version in reversed(versions[-20:]):  # claims (table properties) are the only entries without one
        for line in (table / "_delta_log" / f"{version}.json").read_bytes().splitlines():
            action = orjson.loads(line)
            if "txn" in action:
                return action["txn"]["version"]
    return -1


def _staged(table: Path, task: str, above: int) -> dict[int, set[int]]:
    """Pieces (by batch) of batches above `above` whose files exist, the log not necessarily holding them."""
    found: dict[int, set[int]] = {}
    try:
        names = os.listdir(table / f"task={task}")
    except FileNotFoundError:
        return found
    for name in names:
        m = PIECE.fullmatch(name)
        if m and int(m.group(1)) > above:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return found


def _kill_before_log(proc: subprocess.Popen, table: Path, task: str, pieces: int, deadline: float) -> str:
    """Frozen once `pieces` piece files of a batch the log lacks exist; killed if the log still lacks it."""
    floor, misses = _logged_batch(table), 0
    while True:
        staged = {b: p for b, p in _staged(table, task, floor).items() if len(p) >= pieces}
        if staged:
            batch = max(staged)
            freeze_job(proc)
            logged = _logged_batch(table)
            if logged < batch:
                kill_job(proc)
                return f"hit: batch {batch} pieces {sorted(staged[batch])} on disk, log at {logged}, {misses} misses"
            thaw_job(proc)
            floor, misses = logged, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a staged batch was hit"
        assert time.monotonic() < deadline, f"no staged batch hit in time ({misses} misses)"
        time.sleep(0.0005)


def _pairs(rows: list[dict], spec: dict) -> list[tuple]:
    joins = {t["name"]: t["join"] for t in spec["tasks"]}
    return [(row["task"], *(row[s] for s in joins[row["task"]])) for row in rows]


@pytest.mark.slow
def test_exactly_once_into_kafka_and_delta_across_kill_9_of_the_whole_job(
    apache_kafka_bootstrap, unique_topic, tmp_path
):
    bootstrap = apache_kafka_bootstrap
    seed = int(os.environ.get("WINDJOIN_EO_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    task = f"crash_{uuid.uuid4().hex[:8]}"
    checkpoint, table, results = tmp_path / "checkpoint", tmp_path / "table", unique_topic("results")
    spec = _crash_spec(task, checkpoint, unique_topic, {"kafka": {"topic": results}, "delta": {"path": str(table)}})
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML
    create_topics(bootstrap, [s["topic"] for s in spec["streams"].values()], TOPIC_PARTITIONS)
    create_topics(bootstrap, [spec["dead_letter_topic"]], 1)
    create_topics(bootstrap, [results], RESULT_PARTITIONS)
    plan = list(KILLS)
    rng.shuffle(plan)
    sink = KafkaResultsSink(results, bootstrap)
    producer = PacedProducer(bootstrap, spec, seed)
    procs: list[subprocess.Popen] = []
    log_path = tmp_path / "runs.log"
    history = []  # per kill: (run, kind, what was hit, Kafka's ledger, Delta's log, Spark planned, Spark done)
    info = f"seed {seed}, plan {plan}; log {log_path}"
    started = time.monotonic()
    producer.start()
    try:
        with log_path.open("ab") as log:
            for run, kind in enumerate(plan):
                log.write(f"\n=== run {run}: kill {kind}\n".encode())
                log.flush()
                proc = start_run(spec_path, bootstrap, log)
                procs.append(proc)
                deadline = time.monotonic() + RUN_TIMEOUT_S
                first, batches = spark_log(checkpoint, "commits"), rng.randint(1, 3)
                try:
                    wait_for_commit(proc, checkpoint, first, deadline)
                    wait_for_commit(proc, checkpoint, first + batches - 1, deadline)
                    if kind == "kafka_stage":
                        hit = _kill_in_kafka_stage(proc, sink, task, deadline)
                    elif kind == "delta_stage":
                        hit = _kill_before_log(proc, table, task, 1, deadline)
                    elif kind == "delta_commit":
                        hit = _kill_before_log(proc, table, task, SLOTS, deadline)
                    elif kind == "after_sinks":
                        hit = _kill_after_sinks(proc, sink, task, checkpoint, deadline)
                    else:
                        hit = _kill_at_random(proc, rng)
                except AssertionError as err:
                    raise AssertionError(f"run {run} ({kind}): {err}; {info}, history {history}") from None
                ledger = sink.last_committed(task)
                history.append(
                    (
                        run,
                        kind,
                        hit,
                        -1 if ledger is None else ledger,
                        _logged_batch(table),
                        spark_log(checkpoint, "offsets"),
                        spark_log(checkpoint, "commits"),
                    )
                )
            produced = producer.stop()
            end = max(e["ts"] for e in produced)
            for wave in (1, 2):  # the second run's watermark passes every window: each unpaired row is out
                produce_closers(bootstrap, spec, end + wave * 100_000, TOPIC_PARTITIONS, wave)
                log.write(f"\n=== final run {wave} (--available-now)\n".encode())
                log.flush()
                proc = start_run(spec_path, bootstrap, log, "--available-now")
                procs.append(proc)
                assert proc.wait(timeout=240) == 0, f"the final run {wave} failed; {info}"
        info = f"{info}, kills {history}, {time.monotonic() - started:.0f} s"

        produced.sort(key=lambda e: e["ts"])  # already in event-time order: the oracle refuses none as late
        expected, late = oracle_join(spec, produced)
        assert not late and len(expected) > 1000, info
        want = as_multiset(expected)
        readers = {
            "Kafka (read_committed)": kafka_pairs(bootstrap, results, spec, RESULT_PARTITIONS),
            "Delta, DuckDB over the log": _pairs(read_rows(table, ["R", "S"]).to_pylist(), spec),
            "Delta, polars": _pairs(pl.read_delta(str(table)).select("R", "S", "task").to_dicts(), spec),
        }
        for name, pairs in readers.items():
            got = as_multiset(pairs)
            lost, extra = sum((want - got).values()), sum((got - want).values())
            assert got == want, f"{name}: {lost} lost, {extra} duplicated or wrong of {len(expected)}; {info}"
        done = spark_log(checkpoint, "commits")
        assert sink.last_committed(task) == done, info
        delta_log = read_log(table)  # each batch Spark committed is one table version, in order, none twice
        batches = []
        for version in range(delta_log.version + 1):
            lines = (table / "_delta_log" / f"{version:020d}.json").read_bytes().splitlines()
            batches += [a["txn"]["version"] for a in map(orjson.loads, lines) if "txn" in a]
        assert batches == list(range(done + 1)), f"batches per version {batches}, Spark's last {done}; {info}"
        letters = Counter(letter.reason for letter in read_dead_letters(bootstrap, spec["dead_letter_topic"]))
        assert not letters, f"dead letters by reason {dict(letters)}; {info}"
        # Each deterministic kill left its batch planned and not done, so it was replayed after the restart.
        assert all(planned > done for _, kind, *_, planned, done in history if kind != "random"), info
        # A sink that had committed the replayed batch skipped it, and said so: one log line per replay and sink.
        log_text = log_path.read_text(errors="replace")
        for name, column in ((sink.name, 3), ("Delta", 4)):
            replays = sum(1 for h in history if h[column] > h[-1])
            assert log_text.count(f"a replay, committed before to {name} ") == replays, (name, info)
        print(f"{len(produced)} events, {len(expected)} pairs, {delta_log.version + 1} versions; {info}")
    finally:
        producer.halt()
        for proc in procs:
            if proc.poll() is None or session_members(proc.pid):
                kill_job(proc)
        shutil.rmtree(checkpoint, ignore_errors=True)
