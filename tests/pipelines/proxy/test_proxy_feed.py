"""Pure parts of the fan-out: cutting one store read into chunks with their own cursors."""

from __future__ import annotations

import asyncio

import orjson
import pyarrow as pa
from sse_starlette import ServerSentEvent

from windjoin.operators.query.cursors import CursorCodec
from windjoin.pipelines.proxy.feed import Chunk, End, FeedConfig, Kept, Subscriber, pages

CURSORS = CursorCodec(b"k" * 32)


def test_pages_cut_a_read_into_chunks_whose_cursors_stand_after_their_last_rows() -> None:
    rows = [{"batch_id": b, "row": r} for b in (4, 5) for r in range(7)]
    table = pa.Table.from_pylist(rows)
    after = CURSORS.feed_cursor("a", (5, 6))
    chunks = pages(CURSORS, "a", table, after, 5)
    assert [c.rows.num_rows for c in chunks] == [5, 5, 4]
    assert [r for c in chunks for r in c.rows.to_pylist()] == rows
    for chunk in chunks:
        last = chunk.rows.to_pylist()[-1]
        assert CURSORS.follow_position(chunk.cursor, "a") == ((last["batch_id"], last["row"]), None)
    assert chunks[-1].cursor == after
    assert pages(CURSORS, "a", table.slice(0, 0), after, 5) == []
    resume = CURSORS.resume_cursor("a", (5, 6), 9)  # a resume cursor's chunks keep its Parquet bound
    assert [CURSORS.follow_position(c.cursor, "a")[1] for c in pages(CURSORS, "a", table, resume, 5)] == [9, 9, 9]


def test_reads_take_at_least_a_page() -> None:
    assert FeedConfig(page_rows=7).read_count == 10_000
    assert FeedConfig(page_rows=20_000).read_count == 10_000  # follow reads at most MAX_LIMIT rows
    assert FeedConfig(page_rows=500, read_rows=100).read_count == 500


def test_a_results_frame_is_the_event_sse_starlette_would_encode() -> None:
    rows = [{"R": {"s": "a\nb\r\nc", "k": 1}, "batch_id": 3, "row": 0}, {"R": {"s": "\u00e9\u2028", "k": 2}}]
    kept = Kept(orjson.dumps(rows), 2, CURSORS.feed_cursor("a", (3, 1)))
    assert kept.frame == ServerSentEvent(kept.json.decode(), event="results", id=kept.cursor).encode()
    assert kept.frame is kept.frame  # built once for all its subscribers


def test_a_subscriber_holds_about_its_bytes_of_rows_pending() -> None:
    chunk = Chunk(pa.table({"batch_id": list(range(100)), "row": list(range(100))}), "c")  # 1600 bytes
    big = Chunk(pa.table({"batch_id": list(range(1000)), "row": list(range(1000))}), "c")

    async def run() -> None:
        subscriber = Subscriber(asyncio.Queue(maxsize=100), max_bytes=4000)
        assert subscriber.offer(big)  # larger than the bound: the first chunk always fits
        assert not subscriber.offer(chunk)
        assert await subscriber.take() is big and subscriber.pending_bytes == 0
        assert subscriber.offer(chunk) and subscriber.offer(chunk)
        assert not subscriber.offer(chunk)  # 3 x 1600 > 4000
        assert subscriber.offer(End("gone"))  # the end weighs nothing
        assert await subscriber.take() is chunk and subscriber.pending_bytes == chunk.nbytes
        counted = Subscriber(asyncio.Queue(maxsize=1), max_bytes=1 << 30)
        assert counted.offer(chunk) and not counted.offer(chunk)  # the queue's size bounds it too

    asyncio.run(run())
