"""The continuous-query feed of a task in Redis: its extent, what it can serve, where a start time falls in it,
and its rows after a cursor, read piece by piece from the pieces the entries name.

The feed is the stream `ns:{T}:feed` (`connectors.redis.sink`): one entry per committed piece with rows, id
`<batch_id>-<piece + 1>`, fields `emitted_at`, `rows`, `chunks`. Rows come from the piece's hash a chunk at a time,
so each call moves a bounded number of bytes. A piece that left Redis (retention; `dropped_upto` in the meta hash
records how far) is not served: the feed covers only the batches after it, and a reader that meets a missing
piece gets `PieceGone`. A piece whose index or chunks break their entries (`pieces.ChunkDamaged`, checked before
anything of it is decoded past them) is `PieceDamaged`, with the position past it, once the rows before it are
returned: nothing of it is served and the feed does not stop there.

Positions in the feed are (batch_id, row) cursors: "after row `row` of batch `batch_id`". `row = -1` is "before
the batch", `FEED_END` is "after the whole batch"; `None` is the start of the feed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import redis

from windjoin.connectors.redis.functions import fcall
from windjoin.connectors.redis.keys import feed_key, meta_key, piece_key
from windjoin.connectors.redis.pieces import ChunkDamaged, ChunkEntry, decode_chunk
from windjoin.operators.query.cursors import FEED_END
from windjoin.operators.query.fields import concat_rows, table_rows
from windjoin.operators.query.order import ReadBudget
from windjoin.operators.result_table import MAX_BATCH_ID, MAX_PIECE, PIECE_ROW_BITS, row_bytes

# Feed entries read per XREAD (each names a piece; its rows are read chunk by chunk).
_ENTRIES_PER_READ = 16
# The most a piece's index takes (about 60 bytes an entry: some 70k chunks, a billion rows); a longer one is damaged.
MAX_INDEX_BYTES = 4 << 20


class PieceGone(Exception):
    """A piece the feed names left Redis while it was read (retention): the feed no longer covers its batch."""


class PieceDamaged(Exception):
    """A piece the feed names breaks its index entries; `after` is the feed position just past it (None: a feed
    entry id no cursor can hold, past the largest batch id)."""

    def __init__(self, batch: int, piece: int, why: str) -> None:
        super().__init__(why)
        self.batch, self.piece = batch, piece
        self.after = None if batch > MAX_BATCH_ID else (batch, min(((piece + 1) << PIECE_ROW_BITS) - 1, FEED_END))


@dataclass(frozen=True)
class FeedInfo:
    """The feed's extent: the first and last batch it holds or held (None when it never held any), and whether
    entries were trimmed away (MAXLEN drops the oldest ones; Redis 7 records how many were ever added)."""

    first_batch: int | None
    last_batch: int | None
    trimmed: bool
    length: int


def feed_info(client: redis.Redis, task: str, namespace: str) -> FeedInfo:
    """The feed's extent in one round trip, without transferring any batch."""
    first, last, added, length = fcall(client, "windjoin_feed_info", [feed_key(task, namespace)], [], read_only=True)
    last_batch = _entry_id(last)[0] if last and _entry_id(last) != (0, 0) else None
    first_batch = _entry_id(first)[0] if first else None
    return FeedInfo(first_batch, last_batch, int(added) > int(length), int(length))


@dataclass(frozen=True)
class FeedCoverage:
    """What this Redis can serve of a task's feed: `committed`, its last committed batch (None: it holds nothing of
    the task: never written, or lost), and `serves_from`, the first batch from which it holds every batch with rows
    (None with `committed`): the batch of its first commit (`since`), or later when the feed was trimmed or
    retention dropped pieces."""

    committed: int | None
    serves_from: int | None

    def misses(self, needed: int) -> bool:
        """Whether batch `needed` (and so, maybe, later ones up to `serves_from - 1`) is not in the feed."""
        return self.serves_from is not None and needed < self.serves_from


def feed_coverage(client: redis.Redis, task: str, namespace: str) -> FeedCoverage:
    """The feed's coverage (see FeedCoverage). A meta hash written before `since` existed counts as complete from
    the start."""
    committed, since, dropped = client.hmget(meta_key(task, namespace), "committed", "since", "dropped_upto")
    if committed is None:
        return FeedCoverage(None, None)
    serves_from = 0 if since is None else int(since)
    if dropped is not None:  # retention dropped pieces up to this batch: their entries may still be there
        serves_from = max(serves_from, int(dropped) + 1)
    info = feed_info(client, task, namespace)
    if info.trimmed:
        # conservative: the batches between the last trimmed entry and the first held one may have been empty
        held = info.first_batch if info.first_batch is not None else (info.last_batch or 0) + 1
        serves_from = max(serves_from, held)
    return FeedCoverage(int(committed), serves_from)


def feed_first_batch(client: redis.Redis, task: str, namespace: str) -> int | None:
    """The oldest batch still in the feed, or None when the feed is empty."""
    return feed_info(client, task, namespace).first_batch


def feed_start_at(client: redis.Redis, task: str, namespace: str, from_ms: int) -> tuple[tuple[int, int] | None, bool]:
    """The cursor just before the first feed batch emitted at or after `from_ms`, and whether batches trimmed from
    the feed could have been emitted at or after `from_ms` (then the feed cannot serve from there).

    When every batch held was emitted before `from_ms`, the cursor is after the last one.
    """
    key = feed_key(task, namespace)
    info = feed_info(client, task, namespace)
    if info.first_batch is None:
        return (None if info.last_batch is None else (info.last_batch, FEED_END)), False

    def head(batch: int) -> tuple[int, int] | None:
        found = fcall(client, "windjoin_entry_head", [key], [f"{batch}-0"], read_only=True)
        return None if not found else (_entry_id(found[0])[0], int(found[1]))

    first = head(info.first_batch)
    if first is None or info.last_batch is None:  # emptied meanwhile
        return (info.last_batch, FEED_END) if info.last_batch is not None else None, False
    if first[1] >= from_ms:
        return (info.first_batch, -1), info.trimmed
    answer = None
    lo, hi = info.first_batch, info.last_batch
    while lo <= hi:
        mid = (lo + hi) // 2
        found = head(mid)
        if found is None or found[0] > hi:
            hi = mid - 1
        elif found[1] >= from_ms:
            answer, hi = found[0], mid - 1
        else:
            lo = found[0] + 1
    if answer is None:
        return (info.last_batch, FEED_END), False
    return (answer, -1), False


def read_feed(
    client: redis.Redis,
    task: str,
    namespace: str,
    after: tuple[int, int] | None,
    count: int,
    block_ms: int | None,
    max_bytes: int | None = None,
    schema: pa.Schema | None = None,
) -> pa.Table:
    """Up to `count` result rows (a rows table, `fields.rows_table`) after the (batch_id, row) cursor, in
    (batch_id, row) order, and about `max_bytes` of row values at most (`result_table.row_bytes`; the first row
    always; None: no bound); `schema`: the task's chunk schema (`pieces.chunk_schema`; None: each chunk's own).

    Waits up to `block_ms` for a new batch when none is there (None or 0: does not wait; never waits forever).
    PieceGone when a piece an entry names has left Redis; PieceDamaged when the first piece with rows to read
    breaks its entries (the rows before a damaged piece are returned first)."""
    key = feed_key(task, namespace)
    start = "0-0" if after is None else _start_text(after)
    parts: list[pa.Table] = []
    read = 0
    budget = ReadBudget(2**62 if max_bytes is None else max_bytes)
    block = block_ms if block_ms else None
    while read < count and budget.left > 0:
        reply = client.xread({key: start}, count=_ENTRIES_PER_READ, block=block)
        if not reply:
            break
        entries = reply[0][1]
        for entry_id, _fields in entries:
            batch, seq = _entry_id(entry_id)
            piece = seq - 1
            # rows of a piece are numbered from (piece << 32)
            skip = after[1] + 1 - (piece << PIECE_ROW_BITS) if after is not None and batch == after[0] else 0
            if skip >= 1 << PIECE_ROW_BITS:  # wholly at or before the cursor (past a damaged piece): not read
                continue
            try:
                got = _piece_rows(client, task, namespace, batch, piece, max(skip, 0), count - read, budget, schema)
            except PieceDamaged:
                if parts:
                    return concat_rows(parts)
                raise
            for part in got:
                parts.append(part)
                read += part.num_rows
            if read >= count or budget.left <= 0:
                break
        start = entries[-1][0]
        if read:
            block = None  # something to return: only take what is already there
    return concat_rows(parts)


def _piece_rows(
    client: redis.Redis,
    task: str,
    namespace: str,
    batch: int,
    piece: int,
    skip: int,
    count: int,
    budget: ReadBudget,
    schema: pa.Schema | None,
) -> list[pa.Table]:
    """Up to `count` rows of a piece from position `skip` on (rows tables), read a chunk at a time, within
    `budget`; PieceDamaged when its index or a chunk read breaks what the entries say."""
    if not (0 <= batch <= MAX_BATCH_ID and 0 <= piece <= MAX_PIECE):
        raise PieceDamaged(batch, piece, f"a feed entry naming batch {batch} piece {piece}")
    key = piece_key(task, batch, piece, namespace)
    index = _field(client, key, "index", MAX_INDEX_BYTES, batch, piece)
    if index is None:
        raise PieceGone(f"task {task!r} batch {batch} piece {piece}")
    parts: list[pa.Table] = []
    read = 0
    for entry in _entries(index, batch, piece):
        end = entry.offset + entry.rows
        if end <= skip or read >= count or budget.left <= 0:
            continue
        data = _field(client, key, f"c{entry.seq}", entry.max_stored, batch, piece)
        if data is None:
            raise PieceGone(f"task {task!r} batch {batch} piece {piece}")
        first = max(skip - entry.offset, 0)
        try:
            chunk = decode_chunk(data, entry, schema)
        except ChunkDamaged as err:
            raise PieceDamaged(batch, piece, f"chunk {entry.seq}: {err}") from None
        taken = chunk.slice(first, count - read)
        taken = taken.slice(0, budget.take(row_bytes(taken)))
        parts.append(table_rows(taken, entry.first_row + first + np.arange(taken.num_rows)))
        read += taken.num_rows
    return parts


def _field(client: redis.Redis, key: str, field: str, most: int, batch: int, piece: int) -> bytes | None:
    """A field of a piece (None: gone), never more than `most` bytes of it sent (PieceDamaged when longer)."""
    data, _, size = fcall(client, "windjoin_chunk", [key], [field, most], read_only=True)
    if data is None and int(size):
        raise PieceDamaged(batch, piece, f"its {field} takes {int(size)} bytes, more than {most}")
    return data


def _entries(index: bytes, batch: int, piece: int) -> list[ChunkEntry]:
    """A piece's entries, each of this piece and each starting where the one before ended (PieceDamaged when not)."""
    entries, offset = [], 0
    for member in index.split():
        try:
            entry = ChunkEntry.parse(member)
        except ChunkDamaged as err:
            raise PieceDamaged(batch, piece, str(err)) from None
        if (entry.batch, entry.piece, entry.seq, entry.offset) != (batch, piece, len(entries), offset):
            raise PieceDamaged(batch, piece, f"entry {member[:80]!r} is not chunk {len(entries)} at row {offset}")
        entries.append(entry)
        offset += entry.rows
    return entries


def _start_id(after: tuple[int, int] | None) -> tuple[int, int]:
    """The exclusive XREAD start id of a cursor, as a tuple."""
    if after is None:
        return (0, 0)
    batch, row = after
    if batch < 0:
        return (0, 0)
    return (batch + 1, 0) if row >= FEED_END else (batch, 0)


def _start_text(after: tuple[int, int]) -> str:
    batch, seq = _start_id(after)
    return f"{batch}-{seq}"


def _entry_id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
