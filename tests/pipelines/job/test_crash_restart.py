"""Exactly once across `kill -9` of the whole job, at random moments, during the executors' staging and during
the driver's commit.

The real `windjoin run` runs in its own session (its process group and PySpark's worker daemon, see
`job_processes`) against the fixtures' broker and Redis, with Parquet and Redis sinks, while a producer thread
writes events to the input topics at a steady pace the whole time, also while the job is down (event time
follows the pace, so every Kafka partition is in event-time order). The job is killed with SIGKILL once per
entry of KILLS, in a shuffled order, each time after its run committed 1-3 new batches (Spark's `commits/`):

- `parquet_stage`: while the slots stage a batch in Parquet. The job is frozen (SIGSTOP) as soon as a piece is
  staged in a batch's hidden pending folder; if the batch folder is not there (other pieces being written, the
  driver's rename not done), the frozen job is killed; otherwise it is thawed and the next batch is tried.
- `redis_stage`: while a slot stages its piece in Redis. Redis' `CLIENT PAUSE WRITE` holds the job's next write,
  a slot's staging transaction of the next batch; once a pending Parquet folder of that batch shows the slots
  are staging, with a client blocked, the job is killed and Redis unpaused.
- `commit`: inside the driver's commit, between the sinks: frozen as soon as Parquet holds a new batch (its
  folder renamed), killed if Redis has not committed it yet.
- `after_sinks`: frozen as soon as Redis (written after Parquet) holds a new batch, killed if Spark's commit
  log does not have it yet: both sinks hold a batch that Spark will replay.
- `random`: a random delay of up to a second: inside a batch, while Spark plans or commits, anywhere.

Each run restarts from the same checkpoint; a last `--available-now` run drains the topics, and one more reads
closers that move the watermark past every window (`produce_closers`), so the left outer task beside the inner one
has emitted each unpaired row. Parquet and Redis must then hold exactly the brute-force oracle's results as
multisets (none lost, none twice), both sinks' last
commit must be Spark's, no temporary folder is left, and nothing is dead-lettered (in particular nothing as
`late`). Batches are small (`max_offsets_per_trigger` 100), so every restart catches up a backlog over many
batches, and allowed lateness is 2 s: partitions are read at their own pace in event time, and lateness is
judged per input partition (a reader taking equal offsets per partition, with lateness judged against the
newest tuple of a join partition, lost 772 of 1,332 pairs here).

The Kafka and Delta sinks go through the same kills in `test_crash_restart_kafka_delta`.

Set WINDJOIN_EO_SEED to replay a schedule (the seed is in every assertion message).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.pipelines.job_processes import (
    freeze_job,
    kill_job,
    session_members,
    spark_log,
    start_run,
    thaw_job,
    wait_for_commit,
    wait_until,
)
from tests.pipelines.pipeline_helpers import parquet_pairs, produce_closers, read_dead_letters, redis_pairs
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.redis.sink import RedisSink, clear_task
from windjoin.operators.testing.oracle import as_multiset, oracle_join

KILLS = ("parquet_stage", "redis_stage", "commit", "after_sinks", "random")
BASE_TS = 1_700_000_000_000
STEP_MS = 25  # event i has event time BASE_TS + i * STEP_MS and is produced STEP_MS * i after the start
CHUNK_S = 0.05  # the producer sends what is due every CHUNK_S, flushed
KEYS = 20
WINDOW_MS = 300
LATENESS_MS = 2_000
TOPIC_PARTITIONS = 4
RUN_TIMEOUT_S = 120  # one run may take this long to start and reach its kill
PAUSE_MS = 60_000  # Redis' pause ends by itself after this, should the test die before unpausing
PENDING_DIR = re.compile(r"^\.batch=(\d+)\.pending$")  # a batch's staged pieces in Parquet (its docstring)
HIDDEN_DIR = re.compile(r"^\.batch=(\d+)\.")  # pending or temporary: left only by a crash


class PacedProducer(threading.Thread):
    """Event i (event time BASE_TS + i * STEP_MS) is sent STEP_MS * i after the start, in flushed chunks, in
    event-time order to each topic (so to each of its partitions); `stop` returns the acknowledged events."""

    def __init__(self, bootstrap: str, spec: dict, seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.spec, self.rng = bootstrap, spec, random.Random(seed)
        self.produced: list[dict] = []
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def _event(self, i: int) -> dict:
        ts, k, v = BASE_TS + i * STEP_MS, self.rng.randrange(KEYS), self.rng.randrange(1000)
        return (
            {"stream": "R", "ts": ts, "k": k, "x": v}
            if self.rng.random() < 0.5
            else {"stream": "S", "ts": ts, "k": k, "a": v}
        )

    def run(self) -> None:
        try:
            with BatchProducer(self.bootstrap) as producer:
                started, sent = time.monotonic(), 0
                while not self._halt.is_set():
                    due = int((time.monotonic() - started) * 1000 / STEP_MS) + 1
                    chunk = [self._event(i) for i in range(sent, due)]
                    for name, stream in self.spec["streams"].items():
                        records = [
                            (str(e["k"]).encode(), json.dumps({f: v for f, v in e.items() if f != "stream"}), e["ts"])
                            for e in chunk
                            if e["stream"] == name
                        ]
                        producer.produce_batch(stream["topic"], records)
                    self.produced.extend(chunk)
                    sent = due
                    self._halt.wait(CHUNK_S)
        except BaseException as err:  # re-raised by stop()
            self.error = err

    def halt(self) -> None:
        self._halt.set()
        self.join(timeout=60)

    def stop(self) -> list[dict]:
        self.halt()
        if self.error is not None:
            raise self.error
        return self.produced


def _redis_committed(client: redis.Redis, task: str) -> int:
    value = client.hget(meta_key(task), "committed")
    return -1 if value is None else int(value)


def _pending(parquet: ParquetSink, task: str, above: int) -> list[int]:
    """Batches above `above` with a pending Parquet folder (slots staging, or the driver's rename not done)."""
    task_dir = Path(parquet.task_dir(task))
    if not task_dir.is_dir():
        return []
    found = (PENDING_DIR.match(e.name) for e in os.scandir(task_dir))
    return sorted(batch for m in found if m and (batch := int(m.group(1))) > above)


def _kill_in_parquet_stage(proc: subprocess.Popen, parquet: ParquetSink, task: str, deadline: float) -> str:
    """Kill the job while the slots stage a batch in Parquet: frozen on sight of a staged piece in a pending
    folder, killed if the batch is still not committed (the other slots' pieces, or the rename, to come).
    Returns what was hit."""
    floor = parquet.last_committed(task)  # pending folders of batches up to here are leftovers, not staging
    floor, misses = -1 if floor is None else floor, 0
    while True:
        staging = _pending(parquet, task, floor)
        pieces = _pieces(Path(parquet.pending_dir(task, staging[-1]))) if staging else []
        if pieces:
            batch = staging[-1]
            freeze_job(proc)
            if not Path(parquet.batch_dir(task, batch)).exists():
                kill_job(proc)
                return f"parquet_stage hit: batch {batch} pending with pieces {pieces}, after {misses} misses"
            thaw_job(proc)
            floor, misses = batch, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a Parquet stage was hit"
        assert time.monotonic() < deadline, f"no Parquet stage hit in time ({misses} misses)"
        time.sleep(0.0005)


def _pieces(folder: Path) -> list[str]:
    try:
        return sorted(name for name in os.listdir(folder) if name.startswith("part-"))
    except FileNotFoundError:  # committed (renamed) meanwhile
        return []


def _kill_in_redis_stage(
    proc: subprocess.Popen, admin: redis.Redis, parquet: ParquetSink, task: str, checkpoint: Path, deadline: float
) -> str:
    """Kill the job while Redis holds a slot's staging of a batch. Returns what was hit.

    Paused right after a Spark commit, the job's next Redis write is a slot's staging of the next batch (the
    slots stage in Parquet first, so its pending folder shows it); should it be another, or the batch have no
    results, the job is let go and the next batch tried."""
    misses = 0
    while True:
        done = spark_log(checkpoint, "commits")
        admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
        try:
            wait_until(proc, lambda: admin.info("clients")["blocked_clients"] > 0, deadline, "a held write", 0.005)
            staging = _pending(parquet, task, done)
            if staging and _redis_committed(admin, task) <= done:
                kill_job(proc)
                return f"redis_stage hit: batch {staging[-1]} staging, Redis at {done}, after {misses} misses"
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        misses += 1
        wait_for_commit(proc, checkpoint, done, deadline)


def _kill_in_commit(
    proc: subprocess.Popen, admin: redis.Redis, parquet: ParquetSink, task: str, deadline: float
) -> str:
    """Kill the job inside the driver's commit: frozen as soon as Parquet committed a new batch, killed if Redis
    has not committed it. Returns what was hit."""
    seen, misses = parquet.last_committed(task), 0
    seen = -1 if seen is None else seen
    while True:
        batch = ParquetSink(parquet.files.root).last_committed(task)
        if batch is not None and batch > seen:
            freeze_job(proc)
            if _redis_committed(admin, task) < batch:
                kill_job(proc)
                return f"commit hit: batch {batch} in Parquet, not in Redis, after {misses} misses"
            thaw_job(proc)
            seen, misses = batch, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a commit was hit"
        assert time.monotonic() < deadline, f"no commit hit in time ({misses} misses)"
        time.sleep(0.0005)


def _kill_after_sinks(proc: subprocess.Popen, admin: redis.Redis, task: str, checkpoint: Path, deadline: float) -> str:
    """Kill the job once both sinks committed a batch and Spark has not: frozen as soon as Redis (written after
    Parquet) holds a new batch, killed if Spark's commit log lacks it. Returns what was hit."""
    seen, misses = _redis_committed(admin, task), 0
    while True:
        batch = _redis_committed(admin, task)
        if batch > seen:
            freeze_job(proc)
            if not (checkpoint / "commits" / str(batch)).exists():
                kill_job(proc)
                return f"after_sinks hit: batch {batch} in both sinks, not in Spark's commits, after {misses} misses"
            thaw_job(proc)
            seen, misses = batch, misses + 1
        assert proc.poll() is None, f"the job exited with {proc.returncode} before a commit gap was hit"
        assert time.monotonic() < deadline, f"no commit gap hit in time ({misses} misses)"
        time.sleep(0.001)


def _kill_at_random(proc: subprocess.Popen, rng: random.Random) -> str:
    delay = rng.uniform(0.0, 1.0)
    time.sleep(delay)
    kill_job(proc)
    return f"random: {delay:.2f} s after a commit"


def _crash_spec(task: str, checkpoint: Path, unique_topic, sinks: dict) -> dict:
    """The job under the kills: an inner and a left outer task on R.k = S.k, small batches, into `sinks`."""
    return {
        "window": {"kind": "time", "size_ms": WINDOW_MS},
        "allowed_lateness_ms": LATENESS_MS,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": unique_topic("r"), "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": unique_topic("s"), "key": "k"},
        },
        "tasks": [
            {"name": task, "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
            # a left outer task beside it: which tuples paired survives the kills (the slots rebuild from state)
            {
                "name": f"{task}_left",
                "join": ["R", "S"],
                "type": "left",
                "on": [{"op": "eq", "left": "R.k", "right": "S.k"}],
            },
        ],
        "partitions": 8,
        "slots": 2,
        "trigger_ms": 200,
        "max_offsets_per_trigger": 100,
        "checkpoint": str(checkpoint),
        "dead_letter_topic": unique_topic("dead"),
        "sinks": sinks,
    }


@pytest.mark.slow
def test_exactly_once_across_kill_9_of_the_whole_job(kafka_bootstrap, redis_url, unique_topic, tmp_path):
    seed = int(os.environ.get("WINDJOIN_EO_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    task = f"crash_{uuid.uuid4().hex[:10]}"  # unique: the CLI's Redis sink writes the shared default namespace
    checkpoint, parquet_path = tmp_path / "checkpoint", tmp_path / "parquet"
    sinks = {"parquet": {"path": str(parquet_path)}, "redis": {"url": redis_url, "retain_ms": 10**12}}
    spec = _crash_spec(task, checkpoint, unique_topic, sinks)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML
    create_topics(kafka_bootstrap, [s["topic"] for s in spec["streams"].values()], TOPIC_PARTITIONS)
    create_topics(kafka_bootstrap, [spec["dead_letter_topic"]], 1)
    plan = list(KILLS)
    rng.shuffle(plan)

    parquet = ParquetSink(parquet_path)
    admin = redis_client(redis_url)
    producer = PacedProducer(kafka_bootstrap, spec, seed)
    procs: list[subprocess.Popen] = []
    log_path = tmp_path / "runs.log"
    history = []  # per kill: (run, kind, what was hit, Parquet's last, Redis' last, Spark planned, Spark done)
    info = f"seed {seed}, plan {plan}; log {log_path}"
    started = time.monotonic()
    producer.start()
    try:
        with log_path.open("ab") as log:
            for run, kind in enumerate(plan):
                log.write(f"\n=== run {run}: kill {kind}\n".encode())
                log.flush()
                proc = start_run(spec_path, kafka_bootstrap, log)
                procs.append(proc)
                run_started = time.monotonic()
                deadline = run_started + RUN_TIMEOUT_S
                first, batches = spark_log(checkpoint, "commits"), rng.randint(1, 3)
                try:
                    wait_for_commit(proc, checkpoint, first, deadline)
                    startup = time.monotonic() - run_started
                    wait_for_commit(proc, checkpoint, first + batches - 1, deadline)
                    if kind == "parquet_stage":
                        hit = _kill_in_parquet_stage(proc, parquet, task, deadline)
                    elif kind == "redis_stage":
                        hit = _kill_in_redis_stage(proc, admin, parquet, task, checkpoint, deadline)
                    elif kind == "commit":
                        hit = _kill_in_commit(proc, admin, parquet, task, deadline)
                    elif kind == "after_sinks":
                        hit = _kill_after_sinks(proc, admin, task, checkpoint, deadline)
                    else:
                        hit = _kill_at_random(proc, rng)
                except AssertionError as err:
                    raise AssertionError(f"run {run} ({kind}): {err}; {info}, history {history}") from None
                history.append(
                    (
                        run,
                        kind,
                        f"first commit after {startup:.0f} s, {batches} new batch(es), {hit}",
                        parquet.last_committed(task),
                        _redis_committed(admin, task),
                        spark_log(checkpoint, "offsets"),
                        spark_log(checkpoint, "commits"),
                    )
                )
            produced = producer.stop()
            end = max(e["ts"] for e in produced)
            for wave in (1, 2):  # the second run's watermark passes every window: each unpaired row is out
                produce_closers(kafka_bootstrap, spec, end + wave * 100_000, TOPIC_PARTITIONS, wave)
                log.write(f"\n=== final run {wave} (--available-now)\n".encode())
                log.flush()
                proc = start_run(spec_path, kafka_bootstrap, log, "--available-now")
                procs.append(proc)
                assert proc.wait(timeout=240) == 0, f"the final run {wave} failed; {info}"
        elapsed = time.monotonic() - started
        info = f"{info}, kills {history}, {elapsed:.0f} s"

        produced.sort(key=lambda e: e["ts"])  # already in event-time order: the oracle refuses none as late
        expected, late = oracle_join(spec, produced)
        assert not late and len(expected) > 1000, info
        want = as_multiset(expected)
        sink = RedisSink(redis_url, retain_ms=10**12)
        try:
            for name, got in (("Parquet", parquet_pairs(parquet, spec)), ("Redis", redis_pairs(sink, spec))):
                got = as_multiset(got)
                lost, extra = sum((want - got).values()), sum((got - want).values())
                assert got == want, f"{name}: {lost} lost, {extra} duplicated or wrong of {len(expected)}; {info}"
        finally:
            sink.close()
        assert parquet.last_committed(task) == _redis_committed(admin, task) == spark_log(checkpoint, "commits"), info
        leftovers = [e.name for e in os.scandir(parquet.task_dir(task)) if HIDDEN_DIR.match(e.name)]
        assert not leftovers, f"pending or temporary folders left: {leftovers}; {info}"
        letters = Counter(letter.reason for letter in read_dead_letters(kafka_bootstrap, spec["dead_letter_topic"]))
        assert not letters, f"dead letters by reason {dict(letters)}; {info}"
        # Each deterministic kill left its batch planned and not done, so it was replayed after the restart.
        assert all(planned > done for _, kind, *_, planned, done in history if kind != "random"), info
        # A sink that had committed the replayed batch skipped it, and said so: one log line per replay and sink.
        log_text = log_path.read_text(errors="replace")
        for name, column in (("Parquet", 3), ("Redis", 4)):
            replays = sum(1 for h in history if h[column] is not None and h[column] > h[-1])
            assert log_text.count(f"a replay, committed before to {name} ") == replays, info
        print(f"{len(produced)} events, {len(expected)} pairs; {info}")
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        producer.halt()
        for proc in procs:
            if proc.poll() is None or session_members(proc.pid):
                kill_job(proc)
        for name in (task, f"{task}_left"):
            clear_task(admin, name, "windjoin")
        admin.close()
        shutil.rmtree(checkpoint, ignore_errors=True)
