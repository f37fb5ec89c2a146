"""Exactly-once across crashes: the real `windjoin run` process is killed (SIGKILL) again and again, mid-stream.

The driver runs as a subprocess in its own session (so its process group holds the JVM and the Python workers
too) and is killed with SIGKILL a few committed batches into each run, after a random extra delay, so the kill
lands anywhere: inside a batch, between the Parquet and the Redis commit, while Spark writes its offsets or
commit log, or while the state store uploads. Every run restarts from the same checkpoint; more events are
produced while the job runs; a last `--available-now` run drains the topics. Both sinks must then hold exactly
the oracle's pairs, as multisets: none lost, none twice.

Set WINDJOIN_EO_SEED to replay a failing schedule (the seed is in every assertion message).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from tests.oracle import as_multiset, oracle_join
from tests.pipelines.pipeline_helpers import parquet_pairs, produce_events, redis_pairs
from windjoin.connectors.kafka_producer import produce
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.redis_sink import RedisSink, meta_key, results_key

BASE_TS = 1_700_000_000_000
STEP_MS = 10  # event i has event time BASE_TS + i * STEP_MS
KEYS = 30
KILLS = 3
RUN_TIMEOUT_S = 180  # one run may take this long to commit the batches it waits for


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("windjoin")
    return [str(script)] if script.exists() else [sys.executable, "-m", "windjoin.pipelines"]


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = BASE_TS + i * STEP_MS
        if rng.random() < 0.5:
            out.append({"stream": "R", "ts": ts, "k": rng.randrange(KEYS), "x": rng.randrange(1000)})
        else:
            out.append({"stream": "S", "ts": ts, "k": rng.randrange(KEYS), "a": rng.randrange(1000)})
    return out


def _produce_more(bootstrap: str, spec: dict, events: list[dict]) -> None:
    """Produce to the existing topics (as `produce_events` does, without creating them)."""
    for name, stream in spec["streams"].items():
        records = [
            (str(e["k"]).encode(), json.dumps({k: v for k, v in e.items() if k != "stream"}).encode(), e["ts"])
            for e in events
            if e["stream"] == name
        ]
        produce(bootstrap, stream["topic"], records)


def _group_alive(pgid: int) -> list[int]:
    """PIDs still in process group `pgid` (zombies excluded)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry.name))
    return alive


def _kill_group(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGKILL the run's whole process group (driver, JVM, Python workers) and wait until none is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        for pid in _group_alive(proc.pid):  # a child that was forked while the group was being killed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert not _group_alive(proc.pid), f"processes of group {proc.pid} survived SIGKILL"


def _committed(parquet: ParquetSink, task: str) -> int:
    return len(parquet.committed_batches(task))


def _spark_log(checkpoint: Path, kind: str) -> int:
    """The largest batch id in the checkpoint's `offsets` (planned) or `commits` (done) log; -1 if none."""
    folder = checkpoint / kind
    ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(ids, default=-1)


@pytest.mark.slow
def test_exactly_once_across_sigkills(kafka_bootstrap, redis_url, unique_topic, tmp_path):
    seed = int(os.environ.get("WINDJOIN_EO_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    task = f"eo_{uuid.uuid4().hex[:10]}"  # unique: the CLI's Redis sink writes the shared default namespace
    spec = {
        "window": {"kind": "time", "size_ms": 300},
        # Batches cut topics by offsets, so one stream runs ahead of the other within a batch (and across
        # batches while partitions drain at different speeds); 10 s of event time covers that disorder, while
        # windows still expire (the events span 24 s), so expired segments are part of what is rolled back.
        "allowed_lateness_ms": 10_000,
        "streams": {
            "R": {"fields": {"k": "int", "x": "int"}, "topic": unique_topic("r"), "key": "k"},
            "S": {"fields": {"k": "int", "a": "int"}, "topic": unique_topic("s"), "key": "k"},
        },
        "tasks": [{"name": task, "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": 8,
        "slots": 2,
        "trigger_ms": 200,
        "max_offsets_per_trigger": 150,
        "checkpoint": str(tmp_path / "checkpoint"),
        "sinks": {
            "parquet": {"path": str(tmp_path / "parquet")},
            "redis": {"url": redis_url, "retain_ms": 10**12},
        },
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML
    events = _events(2400, seed)
    first, later = events[:1500], events[1500:]
    chunks = [later[i::KILLS] for i in range(KILLS)]  # one chunk produced during each killed run
    chunks = [sorted(c, key=lambda e: e["ts"]) for c in chunks]
    produce_events(kafka_bootstrap, spec, first)
    produced = list(first)

    parquet = ParquetSink(tmp_path / "parquet")
    procs: list[subprocess.Popen] = []
    log_path = tmp_path / "runs.log"
    history = []  # per kill: (run, batches waited for, delay, Parquet's last, Redis' last, Spark planned, done)
    client = redis.Redis.from_url(redis_url)
    checkpoint = Path(spec["checkpoint"])
    # Some kills come right after a Parquet commit (so before Redis' or Spark's commit of that batch), the
    # others a random moment later (inside the next batch, or while Spark plans or commits).
    delays = [0.0, 0.0, *(rng.uniform(0.0, 1.5) for _ in range(KILLS - 2))]
    rng.shuffle(delays)
    started = time.monotonic()
    try:
        with log_path.open("ab") as log:
            for run in range(KILLS):
                before = _committed(parquet, task)
                wait_for, delay = rng.randint(1, 3), delays[run]
                log.write(f"\n=== run {run}: kill {wait_for} batches after {before}, +{delay:.2f} s\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    [*_cli(), "run", str(spec_path), "--bootstrap", kafka_bootstrap],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                procs.append(proc)
                deadline = time.monotonic() + RUN_TIMEOUT_S
                produced_here = False
                while _committed(parquet, task) < before + wait_for:
                    assert proc.poll() is None, f"seed {seed}: run {run} exited with {proc.returncode}; see {log_path}"
                    assert time.monotonic() < deadline, f"seed {seed}: run {run} committed too few batches"
                    if not produced_here and _committed(parquet, task) > before:
                        _produce_more(kafka_bootstrap, spec, chunks[run])  # while the job runs
                        produced.extend(chunks[run])
                        produced_here = True
                    time.sleep(0.01)
                if not produced_here:
                    _produce_more(kafka_bootstrap, spec, chunks[run])
                    produced.extend(chunks[run])
                time.sleep(delay)
                _kill_group(proc)
                redis_last = client.hget(meta_key(task), "committed")
                history.append(
                    (
                        run,
                        wait_for,
                        round(delay, 2),
                        parquet.last_committed(task),
                        None if redis_last is None else int(redis_last),
                        _spark_log(checkpoint, "offsets"),
                        _spark_log(checkpoint, "commits"),
                    )
                )
            # The last run drains what the topics hold and stops by itself.
            log.write(b"\n=== final run (--available-now)\n")
            log.flush()
            proc = subprocess.Popen(
                [*_cli(), "run", str(spec_path), "--bootstrap", kafka_bootstrap, "--available-now"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            procs.append(proc)
            assert proc.wait(timeout=300) == 0, f"seed {seed}: the final run failed; see {log_path}"
        elapsed = time.monotonic() - started

        assert len(produced) == len(events)
        produced.sort(key=lambda e: e["ts"])  # the oracle's arrival order; time-window results do not depend on it
        expected, late = oracle_join(spec, produced)
        assert not late and len(expected) > 800
        in_parquet = parquet_pairs(parquet, spec)
        sink = RedisSink(redis_url, retain_ms=10**12)
        in_redis = redis_pairs(sink, spec)
        sink.close()
        info = (
            f"seed {seed}, kills (run, batches, delay, Parquet last, Redis last, Spark planned, Spark done) "
            f"{history}, {elapsed:.0f} s; log {log_path}"
        )
        want = as_multiset(expected)
        got_parquet, got_redis = as_multiset(in_parquet), as_multiset(in_redis)
        assert got_parquet == want, (
            f"Parquet: {sum((want - got_parquet).values())} lost, {sum((got_parquet - want).values())} extra; {info}"
        )
        assert got_redis == want, (
            f"Redis: {sum((want - got_redis).values())} lost, {sum((got_redis - want).values())} extra; {info}"
        )
        committed = client.hget(meta_key(task), "committed")
        assert int(committed) == parquet.last_committed(task) == _spark_log(checkpoint, "commits"), info
        # The schedule did what it is for: some kill left a batch planned but not done, so it was replayed.
        assert any(planned > done for *_, planned, done in history), info
        # A sink that had committed the replayed batch skipped it, and said so: one log line per replay and sink.
        log_text = log_path.read_text(errors="replace")
        for sink, column in (("Parquet", 3), ("Redis", 4)):
            replays = sum(1 for h in history if h[column] is not None and h[column] > h[-1])
            assert log_text.count(f"a replay, committed before to {sink} ") == replays, info
        print(info)
    finally:
        for proc in procs:
            if proc.poll() is None or _group_alive(proc.pid):
                _kill_group(proc)
        client.delete(results_key(task), meta_key(task))
        client.close()
        shutil.rmtree(tmp_path / "checkpoint", ignore_errors=True)
