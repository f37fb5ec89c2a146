"""Exactly once into a Delta table across `kill -9` of the whole job, inside the Delta commit and around it.

The harness of `test_crash_restart` (the real `windjoin run` in its own session, a paced producer writing the
whole time, restarts from the same checkpoint, two final `--available-now` runs with closers), with one sink:
`sinks.delta`. The job is killed once per entry of KILLS, in a shuffled order, each after 1-3 new batches:

- `delta_stage`: frozen as soon as a piece file of a batch the log does not hold yet exists in the table folder
  (the slots staging it, or the driver committing it); killed if the log still lacks the batch.
- `delta_commit`: frozen as soon as every slot's piece of such a batch exists (the driver's commit is under way:
  reading footers, writing the log entry); killed if the log still lacks the batch.
- `after_log`: frozen as soon as the log holds a new batch's entry, killed if Spark's commit log lacks it: the
  batch is in the table and Spark will replay it.
- `random`: up to a second after a commit, anywhere.

Then the table, read by DuckDB over the log's JSON commits (`tests/support/delta_reader`, no delta-rs) and by
polars, must equal the brute-force oracle as a multiset; each batch Spark committed is exactly one table version
(the versions' application transactions are 0, 1, 2, ... once each, the last one Spark's), and the job logged each
replay it skipped. Set WINDJOIN_EO_SEED to replay a schedule.
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

from tests.pipelines.job.test_crash_restart import LATENESS_MS, TOPIC_PARTITIONS, WINDOW_MS, PacedProducer
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
from windjoin.operators.testing.oracle import as_multiset, oracle_join

KILLS = ("delta_stage", "delta_commit", "after_log", "random")
RUN_TIMEOUT_S = 120
SLOTS = 2
VERSION = re.compile(r"([0-9]{20})\.json")
PIECE = re.compile(r"batch-([0-9]+)-part-([0-9]+)-[0-9a-f-]+\.parquet")


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


def _kill_after_log(proc: subprocess.Popen, table: Path, checkpoint: Path, deadline: float) -> str:
    """Frozen as soon as the log holds a new batch, killed if Spark's commit log lacks it."""
    seen, misses = _logged_batch(table), 0
    while True:
        batch = _logged_batch(table)
        if batch > seen:
            freeze_job(proc)
            if not (checkpoint / "commits" / str(batch)).exists():
                kill_job(proc)
                return f"after_log hit: batch {batch} in the log, not in Spark's commits, after {misses} misses"
            thaw_job(proc)
            seen, misses = batch, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a log entry was hit"
        assert time.monotonic() < deadline, f"no log entry hit in time ({misses} misses)"
        time.sleep(0.0005)


def _pairs(rows: list[dict], spec: dict) -> list[tuple]:
    joins = {t["name"]: t["join"] for t in spec["tasks"]}
    return [(row["task"], *(row[s] for s in joins[row["task"]])) for row in rows]


@pytest.mark.slow
def test_exactly_once_into_delta_across_kill_9_inside_the_commit(kafka_bootstrap, unique_topic, tmp_path):
    seed = int(os.environ.get("WINDJOIN_EO_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    task = f"delta_{uuid.uuid4().hex[:8]}"
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "table"
    spec = {
        "window": {"kind": "time", "size_ms": WINDOW_MS},
        "allowed_lateness_ms": LATENESS_MS,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": unique_topic("r"), "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": unique_topic("s"), "key": "k"},
        },
        "tasks": [
            {"name": task, "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
            {
                "name": f"{task}_left",
                "join": ["R", "S"],
                "type": "left",
                "on": [{"op": "eq", "left": "R.k", "right": "S.k"}],
            },
        ],
        "partitions": 8,
        "slots": SLOTS,
        "trigger_ms": 200,
        "max_offsets_per_trigger": 100,
        "checkpoint": str(checkpoint),
        "dead_letter_topic": unique_topic("dead"),
        "sinks": {"delta": {"path": str(table)}},
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    create_topics(kafka_bootstrap, [s["topic"] for s in spec["streams"].values()], TOPIC_PARTITIONS)
    create_topics(kafka_bootstrap, [spec["dead_letter_topic"]], 1)
    plan = list(KILLS)
    rng.shuffle(plan)

    producer = PacedProducer(kafka_bootstrap, spec, seed)
    procs: list[subprocess.Popen] = []
    log_path = tmp_path / "runs.log"
    history = []  # per kill: (run, kind, what was hit, the log's last batch, Spark planned, Spark done)
    info = f"seed {seed}, plan {plan}; log {log_path}"
    producer.start()
    try:
        with log_path.open("ab") as log:
            for run, kind in enumerate(plan):
                log.write(f"\n=== run {run}: kill {kind}\n".encode())
                log.flush()
                proc = start_run(spec_path, kafka_bootstrap, log)
                procs.append(proc)
                deadline = time.monotonic() + RUN_TIMEOUT_S
                first, batches = spark_log(checkpoint, "commits"), rng.randint(1, 3)
                try:
                    wait_for_commit(proc, checkpoint, first, deadline)
                    wait_for_commit(proc, checkpoint, first + batches - 1, deadline)
                    if kind == "delta_stage":
                        hit = _kill_before_log(proc, table, task, 1, deadline)
                    elif kind == "delta_commit":
                        hit = _kill_before_log(proc, table, task, SLOTS, deadline)
                    elif kind == "after_log":
                        hit = _kill_after_log(proc, table, checkpoint, deadline)
                    else:
                        delay = rng.uniform(0.0, 1.0)
                        time.sleep(delay)
                        kill_job(proc)
                        hit = f"random: {delay:.2f} s after a commit"
                except AssertionError as err:
                    raise AssertionError(f"run {run} ({kind}): {err}; {info}, history {history}") from None
                history.append(
                    (
                        run,
                        kind,
                        hit,
                        _logged_batch(table),
                        spark_log(checkpoint, "offsets"),
                        spark_log(checkpoint, "commits"),
                    )
                )
            produced = producer.stop()
            end = max(e["ts"] for e in produced)
            for wave in (1, 2):
                produce_closers(kafka_bootstrap, spec, end + wave * 100_000, TOPIC_PARTITIONS, wave)
                log.write(f"\n=== final run {wave} (--available-now)\n".encode())
                log.flush()
                proc = start_run(spec_path, kafka_bootstrap, log, "--available-now")
                procs.append(proc)
                assert proc.wait(timeout=240) == 0, f"the final run {wave} failed; {info}"
        info = f"{info}, kills {history}"

        produced.sort(key=lambda e: e["ts"])
        expected, late = oracle_join(spec, produced)
        assert not late and len(expected) > 1000, info
        want = as_multiset(expected)
        columns = ["R", "S"]
        by_duckdb = as_multiset(_pairs(read_rows(table, columns).to_pylist(), spec))
        by_polars = as_multiset(_pairs(pl.read_delta(str(table)).select(*columns, "task").to_dicts(), spec))
        for name, got in (("DuckDB over the log", by_duckdb), ("polars", by_polars)):
            lost, extra = sum((want - got).values()), sum((got - want).values())
            assert got == want, f"{name}: {lost} lost, {extra} duplicated or wrong of {len(expected)}; {info}"
        # each batch Spark committed is one table version, in order, none twice
        delta_log = read_log(table)
        batches = []
        for version in range(delta_log.version + 1):
            lines = (table / "_delta_log" / f"{version:020d}.json").read_bytes().splitlines()
            batches += [a["txn"]["version"] for a in map(orjson.loads, lines) if "txn" in a]
        done = spark_log(checkpoint, "commits")
        assert batches == list(range(done + 1)), f"batches per version {batches}, Spark's last {done}; {info}"
        letters = Counter(letter.reason for letter in read_dead_letters(kafka_bootstrap, spec["dead_letter_topic"]))
        assert not letters, f"dead letters by reason {dict(letters)}; {info}"
        assert all(planned > done for _, kind, _, _, planned, done in history if kind != "random"), info
        replays = sum(1 for *_, logged, _, done in history if logged > done)
        log_text = log_path.read_text(errors="replace")
        assert log_text.count("a replay, committed before to Delta ") == replays, info
        print(f"{len(produced)} events, {len(expected)} pairs, {delta_log.version + 1} versions; {info}")
    finally:
        producer.halt()
        for proc in procs:
            if proc.poll() is None or session_members(proc.pid):
                kill_job(proc)
        shutil.rmtree(checkpoint, ignore_errors=True)
