"""Pure parts of the fan-out: cutting one store read into chunks with their own cursors."""

from __future__ import annotations

import orjson
import pyarrow as pa
from sse_starlette import ServerSentEvent

from windjoin.operators.query.cursors import CursorCodec
from windjoin.pipelines.proxy.feed import FeedConfig, Kept, pages

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
