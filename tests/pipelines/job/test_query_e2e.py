"""Queries over the real pipeline's output (Kafka → Spark → Parquet with snapshots + Redis, sinks from
`build_sinks`): a one-time query over a span crossing the Redis/Parquet boundary equals the oracle's results for
that span, as multisets, whole or paged; a continuous query from the start of the feed, resumed with its cursor
every few rows, receives every result once, in commit order."""

from __future__ import annotations

import uuid

import pytest

from tests.pipelines.pipeline_helpers import produce_events, punctuated_events, punctuated_spec
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.sink import clear_task
from windjoin.connectors.results.redis_tier import read_all
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query.conditions import parse_condition
from windjoin.operators.query.errors import Gone
from windjoin.operators.spec import parse_spec
from windjoin.operators.testing.oracle import as_multiset, oracle_join
from windjoin.pipelines.job.join_job import start_job
from windjoin.pipelines.job.sinks import build_sinks

BASE_TS = 1_700_000_000_000
N_EVENTS = 900
PUNCTUATE_AT = 450


def _pairs(rows: list[dict], task: str, join: list[str]) -> list[tuple]:
    return [(task, row[join[0]], row[join[1]]) for row in rows]


@pytest.mark.slow
def test_queries_over_the_pipeline_output_equal_the_oracle(spark, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    names = [f"{name}{uuid.uuid4().hex[:8]}" for name in ("eq", "all")]  # Redis keys of this test only
    # one snapshot, closed by the punctuation in the middle; the batches after it stay in Redis only, which keeps
    # only the last 100 ms of result time once the snapshot is closed
    spec_dict = punctuated_spec(names, unique_topic, tmp_path, redis_url, retain_ms=100)
    joins = {t["name"]: t["join"] for t in spec_dict["tasks"]}
    events = punctuated_events(N_EVENTS, {PUNCTUATE_AT}, seed=5, base_ts=BASE_TS)
    produce_events(kafka_bootstrap, spec_dict, events, topic_partitions=1)
    spec = parse_spec(spec_dict)
    sinks = build_sinks(spec)
    query = start_job(spark, spec, kafka_bootstrap, sinks, available_now=True)
    query.awaitTermination(timeout=600)
    assert query.exception() is None
    redis_sink = sinks[1]
    store = ResultStore(spec, redis_url, "windjoin", str(tmp_path / "parquet"))
    try:
        ordinary = [e for i, e in enumerate(events) if i != PUNCTUATE_AT]
        expected, late = oracle_join(spec_dict, ordinary)
        assert not late and len(expected) > 500
        t_from, t_to = BASE_TS + 150, BASE_TS + 800
        snapshots = SnapshotStore(tmp_path / "parquet")
        for task, join in joins.items():
            [snapshot] = snapshots.list(task)
            want = [p for p in expected if p[0] == task and t_from <= max(p[1]["ts"], p[2]["ts"]) <= t_to]
            page = store.one_time(task, t_from, t_to, [], None, MAX_LIMIT, None)
            assert page.next_cursor is None and page.snapshot_id == snapshot.id
            assert as_multiset(_pairs(page.rows, task, join)) == as_multiset(want)
            keys = [(r["result_time"], r["batch_id"], r["row"]) for r in page.rows]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            # the span really crosses the boundary: Parquet served rows Redis no longer holds, and Redis served
            # batches no snapshot holds yet
            in_redis = len(read_all(redis_sink.client, task, redis_sink.namespace, t_from, t_to))
            assert in_redis < len(want)
            assert any(r["batch_id"] > snapshot.last_batch for r in page.rows)
            assert any(r["result_time"] < BASE_TS + PUNCTUATE_AT - 100 for r in page.rows)
            # paged with cursors: the same rows, in the same order
            paged, cursor = [], None
            while True:
                part = store.one_time(task, t_from, t_to, [], None, 37, cursor)
                paged += part.rows
                if part.next_cursor is None:
                    break
                cursor = part.next_cursor
            assert paged == page.rows
            # a selection: the same as filtering the oracle
            where = [parse_condition("R.k in 1,3", store.fields(task))]
            selected = store.one_time(task, t_from, t_to, where, ["R.k", "S.ts"], MAX_LIMIT, None).rows
            assert sorted((r["R"]["k"], r["S"]["ts"]) for r in selected) == sorted(
                (p[1 if join[0] == "R" else 2]["k"], p[2 if join[0] == "R" else 1]["ts"])
                for p in want
                if p[1 if join[0] == "R" else 2]["k"] in (1, 3)
            )
            # continuous: from the start, reconnecting with the cursor every 50 rows; the batches whose pieces
            # Redis gave up after the snapshot come with a 410 whose cursor reads them from Parquet first
            followed, cursor = [], None
            try:
                rows, cursor = store.follow(task, from_ms=0, count=50)
            except Gone as gone:
                assert gone.cursor is not None, gone
                rows, cursor = store.follow(task, after=gone.cursor, count=50)
            while rows:
                followed += rows
                rows, cursor = store.follow(task, after=cursor, count=50)
            assert as_multiset(_pairs(followed, task, join)) == as_multiset([p for p in expected if p[0] == task])
            order = [(r["batch_id"], r["row"]) for r in followed]
            assert order == sorted(order) and len(set(order)) == len(order)
    finally:
        store.close()
        for task in names:
            clear_task(redis_sink.client, task, redis_sink.namespace)
        redis_sink.close()
