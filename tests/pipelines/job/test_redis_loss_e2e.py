"""Redis flushed (FLUSHALL) in the middle of a streaming run (Kafka on the embedded broker -> Spark -> Parquet with
snapshots + Redis, sinks from `build_sinks`), on a private redis-server: one-time queries afterwards still return
every result (equal to the brute-force oracle, as multisets), the job re-marked the Redis/Parquet boundary with a
"recovery" snapshot, and a subscriber that had read part of the feed before the flush gets 410 and, through
`windjoin query follow` against the proxy, resumes from Parquet: every remaining result once, in commit order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import orjson
import pytest

from tests.pipelines.pipeline_helpers import produce_events, punctuated_events, punctuated_spec
from tests.pipelines.proxy_helpers import TOKEN, Server, access
from tests.support.result_pages import all_pages
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.sink import meta_key
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query.errors import Gone
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks
from windjoin.pipelines.proxy.app import create_app

BASE_TS = 1_700_000_000_000
N_EVENTS = 1800
PUNCTUATE_AT = 500  # snapshot 1 closes at the batch holding it, before the flush
READ_AT_BATCH = 1  # the subscriber reads some rows once Redis committed this batch
FLUSH_AT_BATCH = 6  # FLUSHALL once Redis committed this batch


def _pairs(rows: list[dict], task: str, join: list[str]) -> list[tuple]:
    return [(task, row[join[0]], row[join[1]]) for row in rows]


class Flusher(threading.Thread):
    """Watches Redis' commit mark of the first task: reads the feed as a subscriber once batch READ_AT_BATCH is
    committed (then stops reading), and flushes Redis once batch FLUSH_AT_BATCH is."""

    def __init__(self, store: ResultStore, url: str, task: str) -> None:
        super().__init__(daemon=True)
        self.store, self.client, self.task = store, redis_client(url), task
        self.read: list[dict] = []
        self.cursor: str | None = None
        self.flushed_after: int | None = None
        self.stop = threading.Event()

    def _committed(self) -> int:
        value = self.client.hget(meta_key(self.task), "committed")
        return -1 if value is None else int(value)

    def run(self) -> None:
        while not self.stop.is_set():
            committed = self._committed()
            if self.cursor is None and committed >= READ_AT_BATCH:
                self.read, self.cursor = self.store.follow(self.task, from_ms=0, count=25)
            if self.cursor is not None and committed >= FLUSH_AT_BATCH:
                self.client.flushall()
                self.flushed_after = committed
                return
            time.sleep(0.01)


@pytest.mark.slow
def test_results_survive_a_flushall_mid_run(spark, kafka_bootstrap, private_redis, unique_topic, tmp_path):
    names = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]
    spec_dict = punctuated_spec(names, unique_topic, tmp_path, private_redis, retain_ms=100)
    spec_dict["max_offsets_per_trigger"] = 120  # many small batches: the flush lands in the middle of the run
    joins = {t["name"]: t["join"] for t in spec_dict["tasks"]}
    events = punctuated_events(N_EVENTS, {PUNCTUATE_AT}, seed=11, base_ts=BASE_TS)
    produce_events(kafka_bootstrap, spec_dict, events, topic_partitions=1)
    spec = parse_spec(spec_dict)
    expected, late = oracle_join(spec_dict, [e for i, e in enumerate(events) if i != PUNCTUATE_AT])
    assert not late and len(expected) > 1000
    store = ResultStore(spec, private_redis, "windjoin", str(tmp_path / "parquet"))
    flusher = Flusher(store, private_redis, names[0])
    flusher.start()
    try:
        query = start_job(spark, spec, kafka_bootstrap, build_sinks(spec), available_now=True)
        query.awaitTermination(timeout=900)
        assert query.exception() is None
    finally:
        flusher.stop.set()
        flusher.join(timeout=10)
    try:
        assert flusher.flushed_after is not None, "the run ended before the flush"
        last = ParquetSink(tmp_path / "parquet").last_committed(names[0])
        assert last is not None and flusher.flushed_after < last, "the flush was not in the middle of the run"
        snapshots = SnapshotStore(tmp_path / "parquet")
        for task, join in joins.items():
            want = [p for p in expected if p[0] == task]
            # one-time queries: every result, from Parquet (all batches up to the recovery snapshot) and Redis
            rows = all_pages(store, task, BASE_TS - 10**6, BASE_TS + 10**6, MAX_LIMIT)
            assert as_multiset(_pairs(rows, task, join)) == as_multiset(want)
            keys = [(r["result_time"], r["batch_id"], r["row"]) for r in rows]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            # the job re-marked the boundary after the flush: a recovery snapshot, recorded in Redis
            reasons = [s.reason for s in snapshots.list(task)]
            assert reasons[0] == "punctuation" and "recovery" in reasons, reasons
            recorded = store.client.hget(meta_key(task), "snapshot")
            assert recorded is not None and int(recorded) == snapshots.latest(task).id
        # the subscriber: its cursor needs batches the flushed Redis lost -> 410 with a resume cursor
        task, join = names[0], joins[names[0]]
        assert flusher.read, "the subscriber read nothing before the flush"
        with pytest.raises(Gone) as gone:
            store.follow(task, after=flusher.cursor)
        assert gone.value.cursor is not None
        rest = [p for p in expected if p[0] == task]
        for pair in _pairs(flusher.read, task, join):
            rest.remove(pair)
        with Server(create_app(store, access=access())) as server:
            command = [sys.executable, "-m", "windjoin.pipelines", "query", "follow", server.url, task]
            command += ["--cursor", flusher.cursor, "--max-rows", str(len(rest)), "--json"]
            env = {**os.environ, "WINDJOIN_TOKEN": TOKEN}
            done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr
        assert "resuming from Parquet" in done.stderr
        resumed = [orjson.loads(line) for line in done.stdout.splitlines() if line]
        assert as_multiset(_pairs(resumed, task, join)) == as_multiset(rest)
        order = [(r["batch_id"], r["row"]) for r in flusher.read + resumed]
        assert order == sorted(order) and len(set(order)) == len(order)
    finally:
        store.close()
