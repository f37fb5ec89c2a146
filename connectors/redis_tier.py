"""Reading the Redis tier of a task's results consistently with its Parquet snapshots, and its feed.

The keys are the ones `redis_sink` writes (see its docstring): the sorted set `ns:{task}:results`, the hash
`ns:{task}:meta` and the stream `ns:{task}:feed`. When Parquet snapshots are configured, the Redis sink does not
trim (RedisSink(trim=False)); instead, after a snapshot's manifest is committed, the driver calls
`advance_snapshot`, which in one Lua script drops the members that are both older than the Redis retention
(score < cutoff) and inside the snapshot (batch id <= its last batch), and records `snapshot` / `snapshot_batch`
in the meta hash. Hence the invariant readers rely on: Redis holds every result of every batch newer than the
recorded `snapshot_batch`, and the recorded snapshot's manifest exists. A one-time query reads the members of
the span in short steps (`read_span`: at most `_SPAN_CHUNK` members a Lua call, each with the recorded snapshot;
a snapshot that moves between steps makes it read again), keeps the members of newer batches, and reads the older
batches from the Parquet snapshots up to that id: no gap, no duplicate.

Redis lost (restarted without persistence, flushed): the meta hash comes back without the snapshot marker, and
`since` (see `redis_sink`) names the first batch this database holds. Readers then never trust Redis for what it
did not see: a one-time query passes `fallback_batch` to `read_span` (Parquet answers for every committed batch up
to it, Redis for the newer ones), and `feed_coverage` tells a continuous query from which batch on the feed is
complete.

Positions in the feed are (batch_id, row) cursors: "after row `row` of batch `batch_id`". `row = -1` is "before
the batch", `FEED_END` is "after the whole batch"; `None` is the start of the feed.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from windjoin.connectors.redis_sink import feed_key, meta_key, result_time_of, results_key
from windjoin.operators.query.cursors import FEED_END
from windjoin.operators.query.fields import row_key
from windjoin.operators.query.order import FirstRows
from windjoin.operators.result_table import PIECE_ROW_BITS, check_batch_id

__all__ = [
    "FEED_END",
    "FeedInfo",
    "Pace",
    "RedisView",
    "SpanMoved",
    "advance_snapshot",
    "FeedCoverage",
    "feed_coverage",
    "feed_first_batch",
    "feed_info",
    "feed_key",
    "feed_start_at",
    "read_feed",
    "read_span",
]

# Feed entries read per XREAD: a batch can be megabytes, so a large `count` must not pull thousands of batches.
_ENTRIES_PER_READ = 8
_ZREM_CHUNK = 5000

# KEYS: results, meta. ARGV: snapshot id, its last batch, cutoff (or "" for none).
# Returns the number of members removed, or -1 when the recorded snapshot is already at or past this one.
_ADVANCE = """
local recorded = tonumber(redis.call('HGET', KEYS[2], 'snapshot'))
local recorded_batch = tonumber(redis.call('HGET', KEYS[2], 'snapshot_batch'))
local sid = tonumber(ARGV[1])
local last_batch = tonumber(ARGV[2])
if (recorded and recorded >= sid) or (recorded_batch and recorded_batch > last_batch) then
  return -1
end
local removed = 0
if ARGV[3] ~= '' then
  local bound = '(' .. ARGV[3]
  local committed = tonumber(redis.call('HGET', KEYS[2], 'committed'))
  if committed and committed <= last_batch then
    removed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', bound)
  else
    local doomed = {}
    for _, member in ipairs(redis.call('ZRANGE', KEYS[1], '-inf', bound, 'BYSCORE')) do
      if tonumber(string.match(member, '^%[(%d+),')) <= last_batch then
        doomed[#doomed + 1] = member
        if #doomed >= tonumber(ARGV[4]) then
          removed = removed + redis.call('ZREM', KEYS[1], unpack(doomed))
          doomed = {}
        end
      end
    end
    if #doomed > 0 then
      removed = removed + redis.call('ZREM', KEYS[1], unpack(doomed))
    end
  end
end
redis.call('HSET', KEYS[2], 'snapshot', ARGV[1], 'snapshot_batch', ARGV[2])
return removed
"""

# KEYS: feed. Returns {first id or false, last generated id or false, entries ever added, length}, without
# sending any entry's payload over the wire (XINFO STREAM includes the first and last entries).
_FEED_INFO = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {false, false, 0, 0}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local out = {false, false, 0, 0}
for i = 1, #info, 2 do
  local name, value = info[i], info[i + 1]
  if name == 'first-entry' and value then out[1] = value[1]
  elseif name == 'last-generated-id' then out[2] = value
  elseif name == 'entries-added' then out[3] = value
  elseif name == 'length' then out[4] = value
  end
end
return out
"""

# KEYS: feed. ARGV: start id. The id and `emitted_at` of the first entry at or after the id (payload left out).
_ENTRY_HEAD = """
local entry = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', 1)[1]
if not entry then return false end
local fields = entry[2]
for i = 1, #fields, 2 do
  if fields[i] == 'emitted_at' then return {entry[1], fields[i + 1]} end
end
return {entry[1], false}
"""


def advance_snapshot(
    client: redis.Redis, task: str, namespace: str, snapshot_id: int, last_batch: int, cutoff_ms: int | None
) -> int:
    """Record snapshot `snapshot_id` (covering batches <= `last_batch`) as the task's Redis/Parquet boundary and
    drop the members with result time < `cutoff_ms` and batch id <= `last_batch`, atomically.

    Only moves forward: a snapshot id at or below the recorded one (or a last batch below the recorded one)
    changes nothing and returns -1. `cutoff_ms=None` records the boundary and drops nothing. Returns the number
    of members removed.
    """
    snapshot_id = check_batch_id(snapshot_id)
    last_batch = check_batch_id(last_batch)
    if cutoff_ms is not None and (isinstance(cutoff_ms, bool) or not isinstance(cutoff_ms, int)):
        raise ValueError(f"cutoff_ms {cutoff_ms!r} is not an int (epoch ms) or None")
    cutoff = "" if cutoff_ms is None else str(int(cutoff_ms))
    keys = [results_key(task, namespace), meta_key(task, namespace)]
    return int(client.eval(_ADVANCE, 2, *keys, snapshot_id, last_batch, cutoff, _ZREM_CHUNK))


@dataclass
class RedisView:
    """What Redis holds of a span: the recorded snapshot boundary, the last committed batch, and the first result
    rows of batches newer than the boundary (up to the last committed one), ordered by (result_time, batch_id,
    row). `more`: rows were left out at the requested limit (or may have been: the scan stopped early)."""

    snapshot_id: int | None
    snapshot_batch: int | None
    committed: int | None
    rows: list[dict[str, Any]]
    more: bool = False


class SpanMoved(Exception):
    """The recorded snapshot changed between two steps of one scan: the boundary moved, read again."""


# One capped step of a span scan. KEYS: results, meta. ARGV: from, to, resume member ("" to start at `from`), step.
# Returns the meta hash's {snapshot, snapshot_batch, committed}, lost (1: the resume member is gone), at most
# `step` members with scores in [from, to] in (score, member) order, from `from` or just after the resume member
# (by rank: O(log N), right whatever was added or removed elsewhere), and the microseconds the script ran. No
# per-member work in Lua: the caller decodes and filters them.
_SCAN_STEP = """
local t0 = redis.call('TIME')
local function took()
  local t1 = redis.call('TIME')
  return (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])
end
local meta = redis.call('HMGET', KEYS[2], 'snapshot', 'snapshot_batch', 'committed')
local first
if ARGV[3] ~= '' then
  local rank = redis.call('ZRANK', KEYS[1], ARGV[3])
  if not rank then return {meta, 1, {}, took()} end
  first = rank + 1
else
  first = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
end
local last = math.min(first + tonumber(ARGV[4]), redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[2])) - 1
if last < first then return {meta, 0, {}, took()} end
local members = redis.call('ZRANGE', KEYS[1], first, last)
return {meta, 0, members, took()}
"""
_SPAN_CHUNK = 1000  # members per step: a step holds Redis for about a millisecond


@dataclass
class _Step:
    snapshot_id: int | None
    snapshot_batch: int | None
    committed: int | None
    lost: bool
    members: list[bytes]
    done: bool  # the span has no member after these
    redis_s: float  # how long the step held Redis


def _scan_step(client: redis.Redis, keys: list[str], lower: int, upper: int, resume: bytes | None) -> _Step:
    args = [lower, upper, b"" if resume is None else resume, _SPAN_CHUNK]
    (snapshot, snapshot_batch, committed), lost, members, took_us = client.eval(_SCAN_STEP, 2, *keys, *args)
    done = len(members) < _SPAN_CHUNK
    step = _Step(_int(snapshot), _int(snapshot_batch), _int(committed), bool(lost), members, done, took_us / 1e6)
    return step


class Pace:
    """Keeps a process's span reads to at most `share` of Redis' time: one step at a time, each followed by a pause
    (the lock still held) so that the time Redis spent on the steps (as the script measured it) fills at most
    `share` of the wall time. A sink write that arrives meanwhile waits for at most one step, and only `share` of
    the time; a storm of queries slows itself, not the job."""

    def __init__(self, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"Redis read share {share!r} is not accepted (accepted: 0 < share <= 1)")
        self.share = share
        self._lock = threading.Lock()

    def step(self, read: Callable[[], _Step]) -> _Step:
        """Run one step, then pause as the share demands."""
        with self._lock:
            step = read()
            if self.share < 1:
                time.sleep(step.redis_s * (1 / self.share - 1))
        return step


def read_span(
    client: redis.Redis,
    task: str,
    namespace: str,
    t_from: int,
    t_to: int,
    *,
    boundary: bool = True,
    after: tuple[int, int, int] | None = None,
    limit: int | None = None,
    fallback_batch: int | None = None,
    select: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    pace: Pace | None = None,
) -> RedisView:
    """The Redis part of a one-time query over result times [t_from, t_to] (see RedisView).

    Reads in steps of at most `_SPAN_CHUNK` members (each one short Lua call, so that no query holds Redis for
    long, however wide the span or however many members share a score), keeping only the first `limit` rows in
    memory; stops as soon as no later member can be among them. Members of batches after the last committed one
    (as of the first step) are left out. Raises SpanMoved when the recorded snapshot changes between steps.
    `pace`: paces the steps (shared by a process's queries: see Pace).

    `after`: only rows after this (result_time, batch_id, row); `limit`: at most this many rows (the first ones;
    `more` says whether rows were left out); `select`: keeps the rows a query's conditions accept (from a list of
    rows, in order). `boundary=False`: also rows of batches inside the recorded snapshot (for a reader without the
    Parquet tier). `fallback_batch`: the boundary to apply when Redis records no snapshot (then `snapshot_batch`
    is None in the view and rows of batches <= it are left out).
    """
    keys = [results_key(task, namespace), meta_key(task, namespace)]
    lower = int(t_from) if after is None else max(int(t_from), int(after[0]))
    best = FirstRows(2**62 if limit is None else int(limit))
    first: _Step | None = None
    resume: bytes | None = None
    stopped = False
    while True:
        read = functools.partial(_scan_step, client, keys, lower, int(t_to), resume)
        step = pace.step(read) if pace is not None else read()
        if first is None:
            first = step
        elif (step.snapshot_id, step.snapshot_batch) != (first.snapshot_id, first.snapshot_batch):
            raise SpanMoved
        if step.lost:  # the member to resume after was trimmed meanwhile: start again
            raise SpanMoved
        rows = decode_rows(step.members)
        held = rows[-1]["result_time"] if rows else None
        below = first.snapshot_batch if first.snapshot_batch is not None else fallback_batch
        rows = [
            row
            for row in rows
            if (not boundary or below is None or row["batch_id"] > below)
            and first.committed is not None  # members of a batch not committed are staged, not results yet
            and row["batch_id"] <= first.committed
            and (after is None or row_key(row) > after)
        ]
        for row in select(rows) if select is not None else rows:
            best.push(row_key(row), row)
        if step.done:
            break
        worst = best.worst_time()
        if worst is not None and held is not None and held > worst:
            stopped = True  # every later member has a later result time than the rows held
            break
        resume = step.members[-1]
    return RedisView(first.snapshot_id, first.snapshot_batch, first.committed, best.rows(), best.dropped or stopped)


def decode_rows(members: list[bytes]) -> list[dict[str, Any]]:
    """Stored members as result rows (see `decode_row`), parsed in one go."""
    if not members:
        return []
    rows = []
    for batch_id, row, emitted_at, sides in orjson.loads(b"[" + b",".join(members) + b"]"):
        rows.append(
            {**sides, "batch_id": batch_id, "row": row, "emitted_at": emitted_at, "result_time": result_time_of(sides)}
        )
    return rows


def decode_row(member: bytes) -> dict[str, Any]:
    """A stored member as a result row `{<A>: {...}, <B>: {...}, ..., batch_id, row, emitted_at, result_time}`,
    one object per joined stream."""
    batch_id, row, emitted_at, sides = orjson.loads(member)
    return {**sides, "batch_id": batch_id, "row": row, "emitted_at": emitted_at, "result_time": result_time_of(sides)}


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
    first, last, added, length = client.eval(_FEED_INFO, 1, feed_key(task, namespace))
    last_batch = _entry_id(last)[0] if last and _entry_id(last) != (0, 0) else None
    first_batch = _entry_id(first)[0] if first else None
    return FeedInfo(first_batch, last_batch, int(added) > int(length), int(length))


@dataclass(frozen=True)
class FeedCoverage:
    """What this Redis can serve of a task's feed: `committed`, its last committed batch (None: it holds nothing of
    the task: never written, or lost), and `serves_from`, the first batch from which it holds every batch with rows
    (None with `committed`): the batch of its first commit (`since`), or later when the feed was trimmed."""

    committed: int | None
    serves_from: int | None

    def misses(self, needed: int) -> bool:
        """Whether batch `needed` (and so, maybe, later ones up to `serves_from - 1`) is not in the feed."""
        return self.serves_from is not None and needed < self.serves_from


def feed_coverage(client: redis.Redis, task: str, namespace: str) -> FeedCoverage:
    """The feed's coverage (see FeedCoverage). A meta hash written before `since` existed counts as complete from
    the start."""
    committed, since = client.hmget(meta_key(task, namespace), "committed", "since")
    if committed is None:
        return FeedCoverage(None, None)
    serves_from = 0 if since is None else int(since)
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
        found = client.eval(_ENTRY_HEAD, 1, key, f"{batch}-0")
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
) -> list[dict[str, Any]]:
    """Up to `count` result rows after the (batch_id, row) cursor, in (batch_id, row) order.

    Waits up to `block_ms` for a new batch when none is there (None or 0: does not wait; never waits forever).
    """
    key = feed_key(task, namespace)
    start = "0-0" if after is None else _start_text(after)
    rows: list[dict[str, Any]] = []
    block = block_ms if block_ms else None
    while len(rows) < count:
        reply = client.xread({key: start}, count=min(count, _ENTRIES_PER_READ), block=block)
        if not reply:
            break
        entries = reply[0][1]
        for entry_id, fields in entries:
            batch, seq = _entry_id(entry_id)
            members = fields[b"members"].split(b"\n")
            # rows of a piece are numbered from (piece << 32), the piece being the entry's sequence less one
            skip = after[1] + 1 - ((seq - 1) << PIECE_ROW_BITS) if after is not None and batch == after[0] else 0
            for member in members[max(skip, 0) : max(skip, 0) + count - len(rows)]:
                rows.append(decode_row(member))
            if len(rows) >= count:
                break
        start = entries[-1][0]
        if rows:
            block = None  # something to return: only take what is already there
    return rows


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


def _int(value: bytes | None) -> int | None:
    return None if value is None else int(value)
