"""Fan-out of a task's continuous-query feed: one store reader per task, bounded queues per subscriber.

A subscriber (one SSE stream) starts at a cursor. It first catches up on its own with non-blocking reads of the
store (`ResultStore.follow_table`), registers with its task's `TaskFeed`, catches up once more (so nothing committed
while it registered is lost), then takes the rows the task's single reader publishes, skipping those at or
before its own position (so nothing is delivered twice). The reader never waits for a subscriber: a subscriber
whose queue is full is marked slow and dropped from the feed; its stream then ends with a final event naming its
cursor, from which the client resumes. All of this runs on one event loop; only store reads go to threads.

A piece that breaks its index entries (`errors.Damaged`) ends every stream that reaches it with an "end" event
whose error names the task and batch ("damaged: ...") and whose cursor is past the piece: the client is told what
it did not get, and resuming from that cursor goes on with the next piece instead of meeting the damage again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from anyio import CapacityLimiter, to_thread

# The store's own selection, projection and cursors, so that rows selected here are exactly the rows
# `ResultStore.follow` would select.
from windjoin.connectors.results.result_query import MAX_LIMIT, ResultStore
from windjoin.operators.query.conditions import Condition
from windjoin.operators.query.cursors import CursorCodec
from windjoin.operators.query.errors import Damaged, QueryError
from windjoin.operators.query.fields import ROW, project_table, row_position
from windjoin.operators.query.json_rows import rows_json
from windjoin.operators.query.selection import select_table
from windjoin.operators.result_table import BATCH_ID
from windjoin.pipelines.proxy.config import FEED_QUEUE_CHUNKS, FEED_QUEUE_MB

log = logging.getLogger(__name__)

SLOW_CONSUMER = "slow consumer"


@dataclass(eq=False)
class Kept:
    """What a selection keeps of a chunk: the JSON array of its rows (projected), their number and the cursor after
    the chunk. Subscribers with the same selection share one `Kept` per chunk, hence one encoding of its event."""

    json: bytes
    rows: int
    cursor: str

    @functools.cached_property
    def frame(self) -> bytes:
        """The chunk's "results" server-sent event, built once for every subscriber that shares it.

        Built here rather than by sse_starlette's `ServerSentEvent.encode`, which splits the data on line breaks
        with a regular expression and copies it three times: a tenth of the proxy's CPU at 32 whole-stream
        subscribers. The JSON has no line break (orjson escapes them in strings) and the cursor is plain text, so
        the event is these three lines (sse_starlette's field order and CRLF separator)."""
        return b"id: %s\r\nevent: results\r\ndata: %s\r\n\r\n" % (self.cursor.encode(), self.json)


@dataclass(frozen=True)
class Chunk:
    """Full result rows in commit order (a rows table, `fields.rows_table`) and the cursor just after the last.

    `kept` memoises, per selection, what the selection keeps of the whole chunk: subscribers with the same
    selection (the common case: none) share one selection, projection and JSON encoding of each chunk the task's
    reader publishes. Rows stay columns from the store to the JSON: no dict is made per row."""

    rows: pa.Table
    cursor: str
    kept: dict[str, Kept] = field(default_factory=dict, compare=False)

    @functools.cached_property
    def nbytes(self) -> int:
        """The bytes of its rows (Arrow's buffers): what it weighs in a subscriber's queue."""
        return self.rows.nbytes


def pages(cursors: CursorCodec, task: str, rows: pa.Table, cursor: str, page_rows: int) -> list[Chunk]:
    """The rows of one store read (`cursor` after them) as chunks of at most `page_rows` rows, each with the cursor
    after its last row (of the kind of `cursor`: a feed cursor, or a resume cursor reading Parquet; made by
    `cursors`, the store's); [] without rows."""
    chunks = []
    for start in range(0, rows.num_rows, page_rows):
        part = rows.slice(start, page_rows)
        last = start + page_rows >= rows.num_rows
        chunks.append(Chunk(part, cursor if last else cursors.cursor_like(cursor, task, row_position(part, -1))))
    return chunks


@dataclass(frozen=True)
class End:
    """The stream's last message: why it ends, and where the subscriber resumes when not at its own cursor (past a
    damaged piece)."""

    error: str
    cursor: str | None = None


class FeedLost(Exception):
    """The store could not serve a subscription's next page; args[0] says why, `cursor` is where to resume when
    not at the subscription's own cursor."""

    def __init__(self, reason: str, cursor: str | None = None) -> None:
        super().__init__(reason)
        self.cursor = cursor


def _resume(err: Exception) -> str | None:
    """Where a stream resumes after the store failed with `err`: past a damaged piece, else at its own cursor."""
    return err.cursor if isinstance(err, Damaged) else None


def _reason(err: Exception) -> str:
    """What a client is told when its stream ends on a store error."""
    if isinstance(err, QueryError):
        return str(err)
    return f"feed unavailable ({type(err).__name__})"


@dataclass(eq=False)  # hashed by identity: kept in sets
class Subscriber:
    """One stream's inbox from its task's reader: at most the queue's size in chunks and about `max_bytes` of rows
    pending (its first chunk always fits); `slow` once the reader found it full (and dropped it)."""

    queue: asyncio.Queue[Chunk | End]
    max_bytes: int
    pending_bytes: int = 0
    slow: bool = False

    def offer(self, message: Chunk | End) -> bool:
        """Queue the message unless the inbox is full."""
        size = message.nbytes if isinstance(message, Chunk) else 0
        if self.pending_bytes and self.pending_bytes + size > self.max_bytes:
            return False
        try:
            self.queue.put_nowait(message)
        except asyncio.QueueFull:
            return False
        self.pending_bytes += size
        return True

    async def take(self) -> Chunk | End:
        """The next message, waiting for one."""
        message = await self.queue.get()
        if isinstance(message, Chunk):
            self.pending_bytes -= message.nbytes
        return message


@dataclass
class FeedConfig:
    """Fan-out settings. A subscriber holds at most queue_size chunks and about queue_bytes of rows pending (each
    chunk at most page_rows rows and about read_bytes of row values). Its subscribers share the chunks the task's
    reader publishes, so a task's feed holds about queue_bytes of rows at most, however many subscribe, plus each
    selection's encoding of them. A batch arrives at once: queue_bytes is how far behind a subscriber may fall,
    a batch and more, before it counts as slow.

    The reader and catch-ups read `read_rows` rows (and at most about `read_bytes`) at a time and cut them into
    chunks (events) of `page_rows`."""

    queue_size: int = FEED_QUEUE_CHUNKS  # chunks a subscriber may have pending before it counts as slow
    queue_bytes: int = FEED_QUEUE_MB << 20  # bytes of rows a subscriber may have pending before it counts as slow
    page_rows: int = 1000  # rows per chunk, i.e. at most per event
    block_ms: int = 1000  # how long the task reader waits in Redis for new rows per read
    read_rows: int = MAX_LIMIT  # rows per store read (at least page_rows, at most MAX_LIMIT)
    read_bytes: int = 1 << 20  # bytes of row values per store read (about: its first row always)

    @property
    def read_count(self) -> int:
        """Rows per store read: `read_rows` within [page_rows, MAX_LIMIT]."""
        return min(max(self.read_rows, self.page_rows), MAX_LIMIT)


@dataclass
class TaskFeed:
    """The single reader of one task's feed and the subscribers it publishes to."""

    store: ResultStore
    task: str
    config: FeedConfig
    subscribers: set[Subscriber] = field(default_factory=set)
    reader: asyncio.Task[None] | None = None
    limiter: CapacityLimiter | None = None  # threads for blocking feed reads, one per task

    def register(self, subscriber: Subscriber, cursor: str) -> None:
        """Add a subscriber; start the reader at `cursor` (the subscriber's own) when none runs."""
        self.subscribers.add(subscriber)
        if self.reader is None:
            self.reader = asyncio.create_task(self._read(cursor), name=f"feed-{self.task}")

    def unregister(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    async def _read(self, cursor: str) -> None:
        try:
            while self.subscribers:
                rows, cursor = await to_thread.run_sync(
                    self.store.follow_table,
                    self.task,
                    cursor,
                    None,
                    self.config.read_count,
                    self.config.block_ms,
                    self.config.read_bytes,
                    limiter=self.limiter,
                )
                for chunk in pages(self.store.cursors, self.task, rows, cursor, self.config.page_rows):
                    self._publish(chunk)
        except Exception as err:  # the feed is gone for everyone: each subscriber ends and resumes on its own
            log.warning("feed reader of task %r stopped: %s", self.task, err)
            self._publish(End(_reason(err), _resume(err)))
            self.subscribers.clear()
        finally:
            self.reader = None

    def _publish(self, message: Chunk | End) -> None:
        for subscriber in list(self.subscribers):
            if not subscriber.offer(message):
                subscriber.slow = True
                self.subscribers.discard(subscriber)


class FeedHub:
    """One `TaskFeed` per task, created on first use."""

    def __init__(self, store: ResultStore, config: FeedConfig | None = None) -> None:
        self.store = store
        self.config = config or FeedConfig()
        self.feeds: dict[str, TaskFeed] = {}
        self.limiter: CapacityLimiter | None = None

    def feed(self, task: str) -> TaskFeed:
        if self.limiter is None:  # made on the event loop that uses it
            self.limiter = CapacityLimiter(len(self.store.tasks()))
        if task not in self.feeds:
            self.feeds[task] = TaskFeed(self.store, task, self.config, limiter=self.limiter)
        return self.feeds[task]

    async def stop(self) -> None:
        for feed in self.feeds.values():
            if feed.reader is not None:
                feed.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await feed.reader


@dataclass
class Subscription:
    """One continuous query: where it stands (cursor and the position it stands for) and what it keeps of a row."""

    hub: FeedHub
    task: str
    cursor: str | None  # None: before the rows of the first chunk (a start from a time, or from now)
    conditions: Sequence[Condition]
    fields: list[str] | None
    position: tuple[int, int] | None = None  # (batch_id, row) of the last row read, kept or dropped

    def __post_init__(self) -> None:
        self.selection = repr((list(self.conditions), self.fields))  # equal for equal selections
        if self.cursor is not None:
            self.position, _ = self.hub.store.cursors.follow_position(self.cursor, self.task)

    async def events(self, first: Chunk) -> AsyncIterator[tuple[str, Any]]:
        """Events of this stream: ("ready", {"cursor"}) first when the start is a known position; then
        ("results", Kept) for each chunk with rows the selection keeps (`self.cursor` is then the cursor after
        them, `Kept.cursor`); a last ("end", {"error", "cursor"}) when the subscriber was too slow or the feed
        failed. Runs until the client goes away otherwise."""
        feed = self.hub.feed(self.task)
        config = self.hub.config
        subscriber = Subscriber(asyncio.Queue(maxsize=config.queue_size), config.queue_bytes)
        try:
            async for event in self._events(feed, subscriber, first):
                yield event
        except FeedLost as lost:
            yield "end", {"error": lost.args[0], "cursor": self._past(lost.cursor)}
        finally:
            feed.unregister(subscriber)

    async def _events(self, feed: TaskFeed, subscriber: Subscriber, first: Chunk) -> AsyncIterator[tuple[str, Any]]:
        if self.cursor is not None:  # the start is a position: say so, so a client resumes there before any row
            yield "ready", {"cursor": self.cursor}
        chunks = [first]
        while chunks:  # catch up alone, before registering
            for chunk in chunks:
                if kept := self._take(chunk):
                    yield "results", kept
            chunks = await self._catch_up() if chunks[-1].rows.num_rows else []
        assert self.cursor is not None  # set by the first chunk at the latest
        feed.register(subscriber, self.cursor)
        while chunks := await self._catch_up():  # rows committed while registering
            for chunk in chunks:
                if kept := self._take(chunk):
                    yield "results", kept
        while True:
            if subscriber.slow:
                yield "end", {"error": SLOW_CONSUMER, "cursor": self.cursor}
                return
            message = await subscriber.take()
            if isinstance(message, End):
                yield "end", {"error": message.error, "cursor": self._past(message.cursor)}
                return
            if kept := self._take(message):
                yield "results", kept

    async def _catch_up(self) -> list[Chunk]:
        """The rows after this subscription's cursor, read now without waiting, as chunks; [] when there is none.

        Raises `FeedLost` when the store cannot serve them (the feed was trimmed past the cursor, Redis is down)."""
        config = self.hub.config
        try:
            rows, cursor = await to_thread.run_sync(
                self.hub.store.follow_table, self.task, self.cursor, None, config.read_count, 0, config.read_bytes
            )
        except Exception as err:
            raise FeedLost(_reason(err), _resume(err)) from err
        return pages(self.hub.store.cursors, self.task, rows, cursor, config.page_rows)

    def _past(self, cursor: str | None) -> str | None:
        """The cursor a stream ends with: `cursor` (past a damaged piece) when it is ahead of this subscription's
        own, else its own."""
        if cursor is None:
            return self.cursor
        position, _ = self.hub.store.cursors.follow_position(cursor, self.task)
        return cursor if self.position is None or position > self.position else self.cursor

    def _take(self, chunk: Chunk) -> Kept | None:
        """What the selection keeps of the chunk's rows after this subscription's position, or None when it keeps
        none; moves the position and the cursor past the chunk when it held any new row."""
        rows = chunk.rows
        if not rows.num_rows:
            return None
        whole = self.position is None or row_position(rows, 0) > self.position
        if not whole:
            rows = rows.slice(_first_after(rows, self.position))
            if not rows.num_rows:
                return None
        self.position = row_position(rows, -1)
        self.cursor = chunk.cursor
        if whole and self.selection in chunk.kept:
            found = chunk.kept[self.selection]
        else:
            selected = project_table(select_table(rows, self.conditions), self.fields)
            found = Kept(rows_json(selected), selected.num_rows, chunk.cursor)
            if whole:
                chunk.kept[self.selection] = found
        return found if found.rows else None


def _first_after(rows: pa.Table, position: tuple[int, int]) -> int:
    """The index of a rows table's first row after the (batch_id, row) position (rows are in that order)."""
    batches, numbers = (rows.column(name).to_numpy() for name in (BATCH_ID, ROW))
    after = (batches > position[0]) | ((batches == position[0]) & (numbers > position[1]))
    return int(np.argmax(after)) if after.any() else rows.num_rows
