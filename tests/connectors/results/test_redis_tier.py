"""Redis tier on a real Redis: the snapshot boundary (advance_snapshot), a span's chunks read in steps through
`span_scan`, and the continuous-query feed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.result_tables import canonical, make_table, pair, result_time
from windjoin.connectors.redis.feed import (
    FeedCoverage,
    PieceGone,
    feed_coverage,
    feed_first_batch,
    feed_info,
    feed_start_at,
    read_feed,
)
from windjoin.connectors.redis.keys import feed_key, meta_key
from windjoin.connectors.redis.retention import advance_snapshot
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results import span_scan
from windjoin.connectors.results.redis_tier import Pace, RedisSpan, read_all
from windjoin.operators.query.cursors import FEED_END, needed_batch
from windjoin.operators.sink_owner import StaleBatchError

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MAX_TIME = 2**53 - 1
times = st.integers(0, 1000)


@pytest.fixture
def sink_factory(redis_url: str):
    sinks = []

    def make(retain_ms: int = 10**12, trim: bool = False, feed_batches: int = 10_000) -> RedisSink:
        sink = RedisSink(redis_url, retain_ms, f"test_{uuid.uuid4().hex}", trim=trim, feed_batches=feed_batches)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        for task in ("a", "b"):
            sink.clear(task)
        sink.close()


def plain(row: dict[str, Any]) -> bytes:
    return canonical({"R": row["R"], "S": row["S"]})


def simple(ts: int, k: int = 0) -> dict[str, Any]:
    return {"R": {"ts": ts, "k": k, "x": 0.5, "z": "z"}, "S": {"t": 0, "k": k, "d": True}}


def scan(
    sink: RedisSink, lower: int, upper: int, *, below: int | None = None, after: Any = None, n: int = 10**6
) -> tuple[RedisSpan, span_scan.Found]:
    """The first `n` rows of the committed batches after `below` in [lower, upper] after `after`, as a one-time
    query reads Redis: the span's index steps as `span_scan` units."""
    span = RedisSpan(sink.client, "a", sink.namespace, lower, upper, Pace(1.0))
    committed = span.boundary.committed
    units = span.units(lambda e: committed is not None and e.batch <= committed and (below is None or e.batch > below))
    leaves = ["R.ts", "R.k", "R.x", "R.z", "S.t", "S.k", "S.d"]
    return span, span_scan.first_rows(units, span_scan.Span(["R.ts", "S.t"], lower, upper, after, [], n, None, leaves))


def test_trim_false_keeps_everything(sink_factory) -> None:
    sink = sink_factory(retain_ms=10, trim=False)
    sink.write(0, {"a": make_table("a", 0, [simple(0), simple(1000)])})
    assert sink.count("a") == 2  # trim=True would have dropped result time 0 (< 1000 - 10)
    assert sink.max_time("a") == 1000


@SETTINGS
@given(
    batches=st.lists(st.lists(pair(times, times), max_size=8), min_size=1, max_size=6),
    cut=st.data(),
)
def test_advance_snapshot_removes_only_old_pieces_of_the_snapshot(sink_factory, batches, cut) -> None:
    sink = sink_factory()
    every = []
    for batch_id, pairs in enumerate(batches):
        sink.write(batch_id, {"a": make_table("a", batch_id, pairs)})
        every += [(result_time(p), batch_id, row, p) for row, p in enumerate(pairs)]
    newest = {b: max(t for t, b2, *_ in every if b2 == b) for _, b, *_ in every}  # a batch is one piece here
    last_batch = cut.draw(st.integers(0, len(batches) - 1))
    cutoff = cut.draw(st.integers(-1, 1001))
    removed = advance_snapshot(sink.client, "a", sink.namespace, 3, last_batch, cutoff)
    kept = sorted((e for e in every if not (newest[e[1]] < cutoff and e[1] <= last_batch)), key=lambda e: e[:3])
    assert removed == len({b for b in newest if newest[b] < cutoff and b <= last_batch})
    assert [
        (r["result_time"], r["batch_id"], r["row"]) for r in read_all(sink.client, "a", sink.namespace, 0, MAX_TIME)
    ] == [e[:3] for e in kept]
    assert sink.count("a") == len(kept)
    assert sink.client.hmget(meta_key("a", sink.namespace), "snapshot", "snapshot_batch") == [
        b"3",
        str(last_batch).encode(),
    ]
    # the Redis part of a one-time query: batches newer than the recorded boundary, in (result_time, batch, row)
    span, found = scan(sink, 0, MAX_TIME, below=last_batch)
    newer = [e for e in kept if e[1] > last_batch]
    assert (span.boundary.snapshot_id, span.boundary.snapshot_batch, span.boundary.committed) == (
        3,
        last_batch,
        len(batches) - 1,
    )
    assert [key for key, _ in found.keyed] == [e[:3] for e in newer]
    assert [plain(r) for _, r in found.keyed] == [canonical(e[3]) for e in newer]


def test_advance_snapshot_only_moves_forward(sink_factory) -> None:
    sink = sink_factory()
    for b in range(4):
        sink.write(b, {"a": make_table("a", b, [simple(100 * b)])})
    assert advance_snapshot(sink.client, "a", sink.namespace, 5, 2, 150) == 2  # batches 0, 1 (times 0, 100)
    assert advance_snapshot(sink.client, "a", sink.namespace, 5, 3, 10_000) == -1  # same id: nothing
    assert advance_snapshot(sink.client, "a", sink.namespace, 4, 3, 10_000) == -1  # older id: nothing
    assert advance_snapshot(sink.client, "a", sink.namespace, 6, 1, 10_000) == -1  # older last batch: nothing
    assert sink.count("a") == 2
    span, _ = scan(sink, 0, MAX_TIME)
    assert (span.boundary.snapshot_id, span.boundary.snapshot_batch) == (5, 2)
    assert advance_snapshot(sink.client, "a", sink.namespace, 6, 3, None) == 0  # records, removes nothing
    span, _ = scan(sink, 0, MAX_TIME)
    assert (span.boundary.snapshot_id, span.boundary.snapshot_batch) == (6, 3)
    assert sink.count("a") == 2
    # beyond the bytes: the oldest piece leaves, never the newest committed batch's
    assert advance_snapshot(sink.client, "a", sink.namespace, 7, 3, None, max_bytes=1) == 1
    assert [r["batch_id"] for r in read_all(sink.client, "a", sink.namespace, 0, MAX_TIME)] == [3]


def test_a_span_reads_only_the_chunks_it_overlaps(sink_factory) -> None:
    sink = sink_factory()
    sink.write(0, {"a": make_table("a", 0, [simple(t) for t in (5, 10, 15)], emitted_at=9)})
    sink.write(1, {"a": make_table("a", 1, [simple(t) for t in (10, 20, 10)], emitted_at=11)})
    sink.write(2, {"a": make_table("a", 2, [simple(t) for t in (100, 120)], emitted_at=12)})
    span, found = scan(sink, 10, 15)
    assert span.boundary.snapshot_id is None and span.boundary.committed == 1 + 1
    assert [key for key, _ in found.keyed] == [(10, 0, 1), (10, 1, 0), (10, 1, 2), (15, 0, 2)]
    assert found.keyed[0][1] == {**simple(10), "batch_id": 0, "row": 1, "emitted_at": 9, "result_time": 10}
    units = span.units(lambda e: True)
    assert sorted(u.entry.batch for u in units) == [0, 1]  # batch 2's chunk (100..120) is not read
    _, found = scan(sink, 0, MAX_TIME, below=0)
    assert [key[1:] for key, _ in found.keyed] == [(1, 0), (1, 2), (1, 1), (2, 0), (2, 1)]


def test_feed_holds_batches_in_order_and_replays_add_nothing(sink_factory) -> None:
    sink = sink_factory()
    written = []
    for b in (0, 1, 3, 4):  # batch 2 never comes (e.g. empty): no entry
        pairs = [simple(10 * b + i, k=b) for i in range(b + 1)]
        sink.write(b, {"a": make_table("a", b, pairs, emitted_at=1000 + b)})
        written += [(b, i, p) for i, p in enumerate(pairs)]
    with pytest.raises(StaleBatchError):  # an older batch: refused, not in the feed
        sink.write(2, {"a": make_table("a", 2, [simple(7)])})
    sink.write(4, {"a": make_table("a", 4, [simple(7)])})  # a replay: fenced
    sink.write(5, {"a": make_table("a", 5, [])})  # empty: committed, no entry
    rows = read_feed(sink.client, "a", sink.namespace, None, 100, None).to_pylist()
    assert [(r["batch_id"], r["row"]) for r in rows] == [(b, i) for b, i, _ in written]
    assert [plain(r) for r in rows] == [canonical(p) for *_, p in written]
    assert [r["emitted_at"] for r in rows] == [1000 + b for b, *_ in written]
    ids = [entry_id for entry_id, _ in sink.client.xrange(feed_key("a", sink.namespace))]
    assert ids == [b"0-1", b"1-1", b"3-1", b"4-1"]
    assert feed_first_batch(sink.client, "a", sink.namespace) == 0
    # resumption after any (batch, row) cursor, with any page size, gives the rest exactly once
    for k in range(len(written)):
        b, i, _ = written[k]
        for count in (1, 2, 100):
            cursor: tuple[int, int] = (b, i)
            got = []
            while page := read_feed(sink.client, "a", sink.namespace, cursor, count, None).to_pylist():
                assert len(page) <= count
                got += [(r["batch_id"], r["row"]) for r in page]
                cursor = (page[-1]["batch_id"], page[-1]["row"])
            assert got == [(bb, ii) for bb, ii, _ in written[k + 1 :]]
    assert read_feed(sink.client, "a", sink.namespace, (1, FEED_END), 100, None).to_pylist()[0]["batch_id"] == 3
    assert read_feed(sink.client, "a", sink.namespace, (3, -1), 100, None).to_pylist()[0]["batch_id"] == 3
    assert read_feed(sink.client, "a", sink.namespace, (9, FEED_END), 100, None).to_pylist() == []


def test_feed_waits_for_a_new_batch(sink_factory, redis_url: str) -> None:
    import threading
    import time

    sink = sink_factory()
    sink.write(0, {"a": make_table("a", 0, [simple(1)])})
    writer = RedisSink(redis_url, 10**12, sink.namespace, trim=False)
    timer = threading.Timer(0.3, lambda: writer.write(1, {"a": make_table("a", 1, [simple(2), simple(3)])}))
    started = time.monotonic()
    timer.start()
    rows = read_feed(sink.client, "a", sink.namespace, (0, 0), 10, 5000).to_pylist()
    timer.join()
    writer.close()
    assert [(r["batch_id"], r["row"]) for r in rows] == [(1, 0), (1, 1)]
    assert time.monotonic() - started < 4
    started = time.monotonic()
    assert read_feed(sink.client, "a", sink.namespace, (1, 1), 10, 200).to_pylist() == []
    assert time.monotonic() - started >= 0.15


def test_feed_trimming_is_detected(sink_factory) -> None:
    sink = sink_factory(feed_batches=1)
    for b in range(300):  # MAXLEN ~ trims whole stream nodes (100 entries by default)
        sink.write(b, {"a": make_table("a", b, [simple(b), simple(b)], emitted_at=10 * b)})
    info = feed_info(sink.client, "a", sink.namespace)
    assert info.first_batch is not None and info.first_batch > 0 and info.last_batch == 299
    assert info.trimmed and info.length == 300 - info.first_batch
    first = info.first_batch
    coverage = feed_coverage(sink.client, "a", sink.namespace)
    assert coverage.committed == 299 and coverage.serves_from == first
    assert coverage.misses(needed_batch(None))
    assert coverage.misses(needed_batch((first - 2, FEED_END)))
    assert coverage.misses(needed_batch((first - 1, 0)))  # row 1 of that batch is gone
    assert not coverage.misses(needed_batch((first - 1, FEED_END)))
    assert not coverage.misses(needed_batch((first, 0)))
    # from_ms: the first batch emitted at or after it
    assert feed_start_at(sink.client, "a", sink.namespace, 10 * (first + 5)) == ((first + 5, -1), False)
    assert feed_start_at(sink.client, "a", sink.namespace, 10 * (first + 5) - 5) == ((first + 5, -1), False)
    assert feed_start_at(sink.client, "a", sink.namespace, 10**9) == ((299, FEED_END), False)
    assert feed_start_at(sink.client, "a", sink.namespace, 0) == ((first, -1), True)  # older ones were trimmed
    for target in range(10 * first + 1, 10 * 299 + 1, 3):
        cursor, gap = feed_start_at(sink.client, "a", sink.namespace, target)
        assert not gap
        rows = read_feed(sink.client, "a", sink.namespace, cursor, 1, None).to_pylist()
        assert rows[0]["emitted_at"] >= target and rows[0]["emitted_at"] - 10 < target


def test_feed_of_an_unknown_task_is_empty(sink_factory) -> None:
    sink = sink_factory()
    assert feed_info(sink.client, "b", sink.namespace).first_batch is None
    assert feed_first_batch(sink.client, "b", sink.namespace) is None
    assert read_feed(sink.client, "b", sink.namespace, None, 10, None).to_pylist() == []
    assert feed_coverage(sink.client, "b", sink.namespace) == FeedCoverage(None, None)
    assert feed_start_at(sink.client, "b", sink.namespace, 5) == (None, False)


def test_bad_arguments_are_refused(sink_factory) -> None:
    sink = sink_factory()
    with pytest.raises(ValueError, match="task name"):
        advance_snapshot(sink.client, "a}x", sink.namespace, 1, 1, 0)
    with pytest.raises(ValueError, match="batch id"):
        advance_snapshot(sink.client, "a", sink.namespace, -1, 1, 0)
    with pytest.raises(ValueError, match="cutoff_ms"):
        advance_snapshot(sink.client, "a", sink.namespace, 1, 1, 1.5)
    with pytest.raises(ValueError, match="feed_batches"):
        RedisSink(sink.client.connection_pool.connection_kwargs and "redis://localhost:1/0", 10, feed_batches=0)
    assert isinstance(sink.client, redis.Redis)


def test_a_piece_retention_dropped_is_not_served_by_the_feed(sink_factory) -> None:
    sink = sink_factory(retain_ms=100, trim=True)
    sink.write(0, {"a": make_table("a", 0, [simple(0), simple(10)])})
    sink.write(1, {"a": make_table("a", 1, [simple(50)])})
    assert feed_coverage(sink.client, "a", sink.namespace) == FeedCoverage(1, 0)
    sink.write(2, {"a": make_table("a", 2, [simple(200)])})  # bound 100: batches 0 and 1 leave
    assert feed_coverage(sink.client, "a", sink.namespace) == FeedCoverage(2, 2)
    with pytest.raises(PieceGone):  # their entries are still in the feed, their pieces are not
        read_feed(sink.client, "a", sink.namespace, None, 10, None).to_pylist()
    assert [
        r["batch_id"] for r in read_feed(sink.client, "a", sink.namespace, (1, FEED_END), 10, None).to_pylist()
    ] == [2]


@SETTINGS
@given(
    batches=st.lists(st.lists(pair(st.integers(0, 4), st.integers(0, 4)), max_size=12), min_size=1, max_size=5),
    data=st.data(),
)
def test_a_span_pages_through_ties_in_small_steps(sink_factory, monkeypatch, batches, data) -> None:
    """Many equal result times, the index read 3 entries (chunks of 2 rows) a step: limit and cursor cut exactly
    like a sorted list."""
    import windjoin.connectors.redis.pieces as pieces
    import windjoin.connectors.results.redis_tier as tier

    monkeypatch.setattr(tier, "SPAN_STEP", 3)
    monkeypatch.setattr(pieces, "CHUNK_ROWS", 2)
    sink = sink_factory()
    every = []
    for batch_id, pairs in enumerate(batches):
        sink.write(batch_id, {"a": make_table("a", batch_id, pairs)})
        every += [(result_time(p), batch_id, row) for row, p in enumerate(pairs)]
    boundary = data.draw(st.none() | st.integers(0, len(batches) - 1))
    t_from, t_to = sorted(data.draw(st.tuples(st.integers(0, 5), st.integers(0, 5))))
    visible = sorted(e for e in every if t_from <= e[0] <= t_to and not (boundary is not None and e[1] <= boundary))
    limit = data.draw(st.integers(1, 6))
    # page through with the cursor of each page's last row: every row once, in order
    pages, cursor = [], None
    for _ in range(100):
        _, found = scan(sink, t_from, t_to, below=boundary, after=cursor, n=limit + 1)
        keys = [key for key, _ in found.keyed][:limit]
        pages += keys
        if len(found.keyed) <= limit:
            break
        cursor = keys[-1]
    assert pages == visible
