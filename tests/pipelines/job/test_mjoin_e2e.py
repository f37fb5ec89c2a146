"""n-way tasks in the streaming job end to end: Kafka (embedded broker) → Spark (MJoin per hash partition) →
Parquet with snapshots and Redis, read back through the sinks and the one-time and continuous queries.

Every result set must equal the independent n-way brute-force oracle (operators/testing/oracle.py), as multisets.
"""

from __future__ import annotations

import random
import uuid

import pytest

from tests.pipelines.pipeline_helpers import produce_events
from tests.support.redis_rows import redis_rows
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.sink import RedisSink, clear_task
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.query.errors import Gone
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_mjoin
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000
FIELDS = {"k": "int", "x": "int", "y": "float"}


def _events(n: int, seed: int, keys: int, punctuate_at: int | None = None) -> list[dict]:
    """A, B, C events 1 ms apart (k in 0..keys-1); at `punctuate_at`, an A punctuation (kind "end")."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        stream = rng.choice("ABC")
        event = {"stream": stream, "ts": BASE_TS + i, "k": rng.randrange(keys), "x": rng.randrange(20)}
        event["y"] = rng.uniform(0, 10)
        if stream == "A":
            event["kind"] = "data"
        out.append(event)
    if punctuate_at is not None:
        out[punctuate_at] = {"stream": "A", "ts": BASE_TS + punctuate_at, "k": 0, "x": 0, "y": 0.0, "kind": "end"}
    return out


def _spec(unique_topic, tmp_path, window: dict, tasks: list[dict], keyed: bool, **extra) -> dict:
    streams = {name: {"fields": dict(FIELDS), "topic": unique_topic(name.lower())} for name in "ABC"}
    streams["A"]["fields"]["kind"] = "string"
    if keyed:
        for stream in streams.values():
            stream["key"] = "k"
    return {
        "window": window,
        "allowed_lateness_ms": 10_000,  # batches cut each topic by offsets: one stream may run ahead in a batch
        "streams": streams,
        "tasks": tasks,
        "partitions": 8,
        "slots": 2,
        "checkpoint": str(tmp_path / "checkpoint"),
        **extra,
    }


def _combos(rows: list[dict], task: str, join: list[str]) -> list[tuple]:
    return [(task, *(row[s] for s in join)) for row in rows]


def _by_task(expected: list[tuple], task: str) -> list[tuple]:
    return [r for r in expected if r[0] == task]


def _one_time(store: ResultStore, task: str, t_from: int, t_to: int, where: list, limit: int) -> tuple[list, set]:
    """Every row of a one-time query, page after page (`limit` rows each), and the snapshot ids pages were read at."""
    rows, snapshot_ids, cursor = [], set(), None
    while True:
        page = store.one_time(task, t_from, t_to, where, None, limit, cursor)
        rows += page.rows
        snapshot_ids.add(page.snapshot_id)
        if page.next_cursor is None:
            return rows, snapshot_ids
        cursor = page.next_cursor


@pytest.mark.slow
def test_three_way_equi_join_time_window_to_parquet_redis_and_queries(
    spark, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    tri, pair = (f"{name}{uuid.uuid4().hex[:8]}" for name in ("tri", "pair"))  # Redis keys of this test only
    tasks = [
        {
            "name": tri,
            "join": ["A", "B", "C"],
            "on": [
                {"op": "eq", "left": "A.k", "right": "B.k"},
                {"op": "eq", "left": "C.k", "right": "B.k"},
                {"op": "band", "left": "A.x", "right": "C.x", "width": 8},  # a filter between two streams
            ],
        },
        {"name": pair, "join": ["C", "A"], "on": [{"op": "eq", "left": "C.k", "right": "A.k"}]},  # 2-way beside
    ]
    punctuate_at = 700
    spec_dict = _spec(
        unique_topic,
        tmp_path,
        {"kind": "time", "size_ms": 30},
        tasks,
        keyed=True,
        max_offsets_per_trigger=250,  # several batches
        sinks={
            "parquet": {
                "path": str(tmp_path / "parquet"),
                "snapshots": {"every_ms": 3_600_000, "punctuation": {"stream": "A", "field": "kind", "value": "end"}},
            },
            # once the snapshot is closed, Redis keeps only the last 100 ms of result time of the batches it holds
            "redis": {"url": redis_url, "retain_ms": 100},
        },
    )
    events = _events(1500, seed=7, keys=12, punctuate_at=punctuate_at)
    produce_events(kafka_bootstrap, spec_dict, events)
    spec = parse_spec(spec_dict)
    sinks = build_sinks(spec)
    parquet, redis_sink = sinks[0], sinks[1]
    query = start_job(spark, spec, kafka_bootstrap, sinks, available_now=True)
    store = ResultStore(spec, redis_url, "windjoin", str(tmp_path / "parquet"))
    try:
        query.awaitTermination(timeout=600)
        assert query.exception() is None
        expected, late = oracle_mjoin(spec_dict, [e for i, e in enumerate(events) if i != punctuate_at])
        assert not late and len(_by_task(expected, tri)) > 300 and len(_by_task(expected, pair)) > 300
        joins = {t["name"]: t["join"] for t in tasks}
        snapshots = SnapshotStore(tmp_path / "parquet")
        for task, join in joins.items():
            [snapshot] = snapshots.list(task)
            want = as_multiset(_by_task(expected, task))
            # Parquet holds every batch's results
            assert as_multiset(_combos(parquet.read(task).to_pylist(), task, join)) == want
            # continuous query from the start, resumed every 97 rows: the batches whose pieces Redis gave up after
            # the snapshot come with a 410 whose cursor reads them from Parquet, then the feed
            try:
                followed, (rows, cursor) = [], store.follow(task, from_ms=0, count=97)
            except Gone as gone:
                assert gone.cursor is not None, gone
                followed, (rows, cursor) = [], store.follow(task, after=gone.cursor, count=97)
            while rows:
                followed += rows
                rows, cursor = store.follow(task, after=cursor, count=97)
            assert as_multiset(_combos(followed, task, join)) == want
            # one-time query over everything: Parquet (the snapshot) + Redis (newer batches), no gap, no duplicate
            rows, snapshot_ids = _one_time(store, task, 0, 2**53 - 1, [], MAX_LIMIT)
            assert snapshot_ids == {snapshot.id}
            assert as_multiset(_combos(rows, task, join)) == want
            keys = [(r["result_time"], r["batch_id"], r["row"]) for r in rows]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            assert all(r["result_time"] == max(r[s]["ts"] for s in join) for r in rows)
            # the query really crossed the tiers: Redis no longer holds all, and holds batches past the snapshot
            assert redis_sink.count(task) < len(rows)
            assert any(r["batch_id"] > snapshot.last_batch for r in rows)
        # a span and a selection on the 3-way task, paged: equal to filtering the oracle
        t_from, t_to = BASE_TS + 400, BASE_TS + 1100
        where = [parse_condition("B.k in 1,2,3", store.fields(tri)), parse_condition("C.x>=5", store.fields(tri))]
        paged, _ = _one_time(store, tri, t_from, t_to, where, 41)
        chosen = [
            r
            for r in _by_task(expected, tri)
            if t_from <= max(t["ts"] for t in r[1:]) <= t_to and r[2]["k"] in (1, 2, 3) and r[3]["x"] >= 5
        ]
        assert len(chosen) > 20 and as_multiset(_combos(paged, tri, joins[tri])) == as_multiset(chosen)
    finally:
        store.close()
        for task in (tri, pair):
            clear_task(redis_sink.client, task, redis_sink.namespace)
        redis_sink.close()


@pytest.mark.slow
def test_three_way_count_window_on_one_partition(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    tasks = [
        {
            "name": "tri",
            "join": ["B", "A", "C"],
            "on": [{"op": "eq", "left": "A.k", "right": "B.k"}, {"op": "eq", "left": "B.k", "right": "C.k"}],
        }
    ]
    # Unkeyed streams: every tuple in one partition (count windows count per partition), one batch
    spec_dict = _spec(unique_topic, tmp_path, {"kind": "count", "size": 12}, tasks, keyed=False)
    events = _events(900, seed=3, keys=4)
    produce_events(kafka_bootstrap, spec_dict, events, topic_partitions=1)
    spec = parse_spec(spec_dict)
    parquet = ParquetSink(tmp_path / "parquet")
    namespace = f"t{uuid.uuid4().hex[:8]}"
    redis_sink = RedisSink(redis_url, retain_ms=10**12, namespace=namespace)
    try:
        query = start_job(spark, spec, kafka_bootstrap, [parquet, redis_sink], available_now=True)
        query.awaitTermination(timeout=600)
        assert query.exception() is None
        # One batch; arrival order inside it is (ts, topic, partition, offset) = the events' order here.
        expected, _ = oracle_mjoin(spec_dict, events)
        assert len(expected) > 300
        join = tasks[0]["join"]
        assert as_multiset(_combos(parquet.read("tri").to_pylist(), "tri", join)) == as_multiset(expected)
        assert as_multiset(_combos(redis_rows(redis_sink, "tri", 0, 2**53), "tri", join)) == as_multiset(expected)
        with ResultStore(spec, redis_url, namespace, None) as store:
            rows, _ = _one_time(store, "tri", 0, 2**53 - 1, [], MAX_LIMIT)
            assert as_multiset(_combos(rows, "tri", join)) == as_multiset(expected)
    finally:
        clear_task(redis_sink.client, "tri", namespace)
        redis_sink.close()
