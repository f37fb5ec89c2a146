"""Redis filled to its maxmemory in the middle of a streaming run (Kafka on the embedded broker -> Spark -> Parquet
with snapshots + Redis, sinks from `build_sinks`), on a private redis-server started with noeviction: the job goes
on to the end, the batches Redis refused are counted and left to Parquet (a "recovery" snapshot each time, which
empties Redis of what Parquet holds), and one-time queries afterwards return every result (equal to the
brute-force oracle, as multisets, in order, once each)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.pipelines.pipeline_helpers import produce_events, punctuated_events, punctuated_spec
from tests.support.result_pages import all_pages
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000
N_EVENTS = 1800
PUNCTUATE_AT = 500  # snapshot 1 closes at the batch holding it, before Redis fills
FULL_AT_BATCH = 6  # Redis is at its maxmemory once it committed this batch


class Filler(threading.Thread):
    """Sets Redis' maxmemory to what it uses once batch FULL_AT_BATCH of the first task is committed."""

    def __init__(self, url: str, task: str) -> None:
        super().__init__(daemon=True)
        self.client, self.task = redis_client(url), task
        self.filled_after: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            committed = self.client.hget(meta_key(self.task), "committed")
            if committed is not None and int(committed) >= FULL_AT_BATCH:
                self.client.config_set("maxmemory", int(self.client.info("memory")["used_memory"]))
                self.filled_after = int(committed)
                return
            time.sleep(0.01)


@pytest.mark.slow
def test_a_full_redis_leaves_batches_to_parquet_and_the_job_goes_on(
    spark, kafka_bootstrap, private_redis, unique_topic, tmp_path
):
    names = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]
    spec_dict = punctuated_spec(names, unique_topic, tmp_path, private_redis, retain_ms=10**9)
    spec_dict["max_offsets_per_trigger"] = 120  # many small batches: Redis fills in the middle of the run
    joins = {t["name"]: t["join"] for t in spec_dict["tasks"]}
    events = punctuated_events(N_EVENTS, {PUNCTUATE_AT}, seed=13, base_ts=BASE_TS)
    produce_events(kafka_bootstrap, spec_dict, events, topic_partitions=1)
    spec = parse_spec(spec_dict)
    expected, late = oracle_join(spec_dict, [e for i, e in enumerate(events) if i != PUNCTUATE_AT])
    assert not late and len(expected) > 1000
    filler = Filler(private_redis, names[0])
    filler.start()
    try:
        query = start_job(spark, spec, kafka_bootstrap, build_sinks(spec), available_now=True)
        query.awaitTermination(timeout=900)
        assert query.exception() is None  # the job went on
    finally:
        filler.stop.set()
        filler.join(timeout=10)
    store = ResultStore(spec, private_redis, "windjoin", str(tmp_path / "parquet"))
    try:
        assert filler.filled_after is not None, "the run ended before Redis filled"
        last = ParquetSink(tmp_path / "parquet").last_committed(names[0])
        assert last is not None and filler.filled_after < last, "Redis did not fill in the middle of the run"
        snapshots = SnapshotStore(tmp_path / "parquet")
        refused = 0
        for task, join in joins.items():
            meta = store.client.hgetall(meta_key(task))
            refused += int(meta.get(b"full_batches", 0))
            assert int(meta[b"committed"]) == last  # every batch closed in Redis too (refused ones included)
            rows = all_pages(store, task, BASE_TS - 10**6, BASE_TS + 10**6, MAX_LIMIT)
            pairs = [(task, row[join[0]], row[join[1]]) for row in rows]
            assert as_multiset(pairs) == as_multiset([p for p in expected if p[0] == task])
            keys = [(r["result_time"], r["batch_id"], r["row"]) for r in rows]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert refused >= 1, "Redis refused no batch"
        assert any(s.reason == "recovery" for task in names for s in snapshots.list(task))
        print(f"Redis filled after batch {filler.filled_after}; batches it refused (both tasks): {refused}")
    finally:
        store.close()
