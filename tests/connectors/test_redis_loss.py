"""Redis lost (restarted empty, flushed) under both result tiers, on real Redis and real Parquet files: one-time
queries still answer every result written, the snapshot committer recovers the boundary marker from the manifests
at the next batch, and a continuous query whose cursor the new Redis cannot serve gets 410 with a cursor that
resumes from Parquet, without loss or duplicate. The loss is the deletion of the test namespace's keys (FLUSHALL
would wipe the session's shared Redis; tests/pipelines/job/test_redis_loss_e2e.py flushes a private one)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.connectors.sink_cases import SPEC
from tests.connectors.tiers import Tiers, TiersLayout
from tests.support.redis_loss import Job, follow_all
from tests.support.result_pages import all_pages, expected, got, record
from tests.support.result_tables import make_table
from windjoin.connectors.redis import feed as redis_feed
from windjoin.connectors.redis.keys import meta_key
from windjoin.connectors.results.result_query import MAX_LIMIT
from windjoin.operators.query.errors import Gone

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
times = st.integers(0, 1000)
pair = st.fixed_dictionaries(
    {
        "R": st.fixed_dictionaries({"ts": times, "k": st.integers(0, 3), "x": st.just(0.5), "z": st.just("z")}),
        "S": st.fixed_dictionaries({"t": times, "k": st.integers(0, 3), "d": st.booleans()}),
    }
)
batch = st.tuples(st.lists(pair, max_size=5), st.booleans())  # (pairs, punctuated: closes a snapshot)


@pytest.fixture
def tiers_layout() -> TiersLayout:
    return TiersLayout(SPEC, ("a", "b"), make_table, record)


def lose_redis(tiers: Tiers) -> None:
    """What a Redis restarted without persistence holds of the test's keys: nothing."""
    tiers.redis.clear("a")


def written_after(tiers: Tiers, position: tuple[int, int]) -> list[tuple[int, int]]:
    return sorted((b, r) for _, b, r, task, _, _ in tiers.written if task == "a" and (b, r) > position)


@SETTINGS
@given(
    before=st.lists(batch, min_size=1, max_size=6),
    after=st.lists(batch, max_size=4),
    read=st.integers(0, 40),
    limit=st.integers(1, 6),
)
def test_results_survive_a_redis_loss(tiers_factory, before, after, read, limit) -> None:
    tiers = tiers_factory(retain_ms=50)
    job = Job(tiers)
    for pairs, punctuated in before:
        job.batch(pairs, punctuated)
    with tiers.store() as store:
        # a subscriber that read `read` rows from the start before Redis was lost (retention may have dropped the
        # oldest pieces from Redis already: then the 410's cursor reads them from Parquet)
        try:
            rows, cursor = store.follow("a", from_ms=0, count=read) if read else ([], "")
        except Gone as err:
            assert err.cursor is not None, err
            rows, cursor = store.follow("a", after=err.cursor, count=read)
        position = (rows[-1]["batch_id"], rows[-1]["row"]) if rows else (-1, -1)
        if not rows:
            cursor = store.cursors.feed_cursor("a", None)
        snapshotted = tiers.snapshots.latest("a") is not None
        lose_redis(tiers)
        # right after the loss, before the job's next batch: Parquet answers for everything
        assert got(store.one_time("a", -5, 1005, [], None, MAX_LIMIT, None).rows) == expected(tiers, "a", -5, 1005)
        assert got(all_pages(store, "a", -5, 1005, limit)) == expected(tiers, "a", -5, 1005)
        seen, _ = follow_all(store, cursor)
        assert seen == written_after(tiers, position)
        for pairs, punctuated in after:
            job.batch(pairs, punctuated)
        if after and snapshotted:  # the committer re-marked the boundary from the manifests at the next batch
            latest = tiers.snapshots.latest("a")
            assert latest is not None and latest.last_batch >= tiers.next_batch - len(after)
            marked = tiers.redis.client.hget(meta_key("a", tiers.namespace), "snapshot")
            assert marked is not None and int(marked) == latest.id
        assert got(all_pages(store, "a", -5, 1005, limit)) == expected(tiers, "a", -5, 1005)
        seen, _ = follow_all(store, cursor)
        assert seen == written_after(tiers, position)


def test_the_marker_is_recovered_and_a_subscriber_gets_410_then_everything(tiers_factory) -> None:
    """The scenario spelled out: snapshot 1 holds batches 0..1 (Redis gave their old rows up), batch 2 is in Redis
    and Parquet only, a subscriber stands after batch 0; Redis is lost; batch 3 comes."""
    tiers = tiers_factory(retain_ms=50)
    job = Job(tiers)

    def pairs(*ts: int) -> list[dict[str, Any]]:
        return [{"R": {"ts": t, "k": 1, "x": 0.5, "z": "z"}, "S": {"t": t, "k": 1, "d": True}} for t in ts]

    job.batch(pairs(0, 10))
    job.batch(pairs(500), punctuated=True)  # snapshot 1: batches 0..1; cutoff 450: rows 0 and 10 leave Redis
    job.batch(pairs(20, 600))
    with tiers.store() as store, tiers.store(parquet=False) as redis_only:
        with pytest.raises(Gone, match=r"batches 0\.\.0 from Parquet") as err:  # batch 0's piece left Redis
            store.follow("a", from_ms=0, count=2)
        rows, cursor = store.follow("a", after=err.value.cursor, count=2)
        assert [(r["batch_id"], r["row"]) for r in rows] == [(0, 0), (0, 1)]
        assert store.one_time("a", 0, 1000, [], None, 100, None).snapshot_id == 1
        lose_redis(tiers)
        # without the fix a one-time query read Redis alone: nothing
        assert redis_only.one_time("a", 0, 1000, [], None, 100, None).rows == []
        page = store.one_time("a", 0, 1000, [], None, 100, None)
        assert [(r["result_time"], r["batch_id"]) for r in page.rows] == [(0, 0), (10, 0), (20, 2), (500, 1), (600, 2)]
        with pytest.raises(Gone, match="from Parquet") as err:
            store.follow("a", after=cursor)
        job.batch(pairs(700))  # batch 3: Redis holds it alone; the committer closes a recovery snapshot 2 (0..3)
        [snapshot_1, snapshot_2] = tiers.snapshots.list("a")
        assert (snapshot_2.reason, snapshot_2.first_batch, snapshot_2.last_batch) == ("recovery", 2, 3)
        assert tiers.redis.client.hget(meta_key("a", tiers.namespace), "snapshot") == b"2"
        page = store.one_time("a", 0, 1000, [], None, 100, None)
        assert page.snapshot_id == 2
        assert [(r["result_time"], r["batch_id"]) for r in page.rows] == [
            (0, 0),
            (10, 0),
            (20, 2),
            (500, 1),
            (600, 2),
            (700, 3),
        ]
        with pytest.raises(Gone, match=r"batches 1\.\.2 from Parquet") as err:
            store.follow("a", after=cursor)  # Redis serves from batch 3 (`since`); the rest of 1..2 from Parquet
        rows, resumed = store.follow("a", after=err.value.cursor, count=100)
        assert [(r["batch_id"], r["row"]) for r in rows] == [(1, 0), (2, 0), (2, 1)]
        rows, _ = store.follow("a", after=resumed, count=100)
        assert [(r["batch_id"], r["row"]) for r in rows] == [(3, 0)]
        # a subscriber starting from a time: 410 too, resuming at the first batch emitted since
        with pytest.raises(Gone) as err:
            store.follow("a", from_ms=0)
        assert err.value.cursor is not None
        assert follow_all(store, err.value.cursor)[0] == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (3, 0)]
        # from now: after batch 3, nothing more
        assert store.follow("a")[0] == []


def test_a_read_waiting_in_the_feed_when_redis_is_lost_does_not_skip_batches(tiers_factory, monkeypatch) -> None:
    """The gap check ran before the loss; the read then returns the first batch written after it: the rows in
    between are not skipped, the read answers 410."""
    tiers = tiers_factory()
    job = Job(tiers)
    one = [{"R": {"ts": 1, "k": 1, "x": 0.5, "z": "z"}, "S": {"t": 1, "k": 1, "d": True}}]
    job.batch(one)
    with tiers.store() as store:
        _, cursor = store.follow("a", from_ms=0, count=1)  # after batch 0
        job.batch(one)  # batch 1: the subscriber has not read it
        real = redis_feed.read_feed

        def read_feed(*args: Any, **kw: Any) -> Any:  # Redis is lost and batch 2 written while the read runs
            lose_redis(tiers)
            job.batch(one)
            return real(*args, **kw)

        monkeypatch.setattr(redis_feed, "read_feed", read_feed)
        with pytest.raises(Gone) as err:
            store.follow("a", after=cursor, count=10)
        monkeypatch.setattr(redis_feed, "read_feed", real)
        rows, _ = store.follow("a", after=err.value.cursor, count=10)
        assert [(r["batch_id"], r["row"]) for r in rows] == [(1, 0)]
