"""Keeping each task's recent results in Redis, written at most once per (task, batch id), queryable by time.

Data layout per task (`ns` is the namespace, default "windjoin"; `{task}` is a Redis Cluster hash tag, so a
task's keys share one slot):

- `ns:{task}:results` - sorted set. Score: the result's result time (max of its tuples' timestamps, epoch
  ms; exact as a double up to 2^53). Member: the result as compact JSON, an array
  `[batch_id, row, emitted_at, {"<stream>": {field: value, ...}, "<stream>": {...}, ...}]`, one object per joined
  stream (two for a pair, n for an n-way task), streams in join order, each stream's timestamp first.
  `(batch_id, row)` makes every member unique, so equal results from different rows never collapse. A time-span
  query is one `ZRANGE key t_from t_to BYSCORE`; among equal scores Redis orders members bytewise, so readers
  that need (result time, batch id, row) order sort the decoded members (`query` does).
- `ns:{task}:meta` - hash: `committed` (last committed batch id), `max_time` (largest result time seen), `since`
  (the batch of the first commit into this database: it holds the task's batches from there on, so a Redis that
  restarted empty, or was flushed, is told apart from one that saw every batch); with Parquet snapshots also
  `snapshot` / `snapshot_batch` (written by `redis_tier.advance_snapshot`).
- `ns:{task}:feed` - stream, the continuous-query feed: one entry per piece (a slot's part of a batch) that has
  rows, entry id `<batch_id>-<piece + 1>` (so the feed is in commit order and a (batch, row) cursor maps onto entry
  ids), fields `emitted_at` (the piece's emission time, epoch ms) and `members` (the piece's members in row order,
  joined by "\n"; JSON text never holds a raw newline). Capped with `MAXLEN ~ feed_batches * pieces` (the
  pieces of the batch committed: about `feed_batches` batches while the number of slots with results holds).
  A member's `row` is `piece << 32 | position in the piece` (`result_table.piece_rows`).
- `ns:{task}:stage:<piece>` - hash, a piece staged and not yet committed: `batch`, `emitted_at`, `members`.
- `ns:{task}:owner` - hash: `run_id`, `checkpoint`, the checkpoint whose batches the task's keys hold
  (`sink_owner.CheckpointId`), set when a job claims the task (`pipelines.job.sink_fence`).

Two phases, exactly once. Stage (`stage`, each slot's task on an executor, per task and piece): WATCH the meta hash
and the piece's stage hash and read them; nothing is done when `committed` is the batch id (a replay) or the stage
hash already holds the batch (an earlier attempt, which a replay repeats exactly); else MULTI, add the piece's
members (ZADD) and write the stage hash, EXEC (started over if a watched key changed). Commit (`commit`, on the
driver once every slot staged, one Lua script per task): unless `committed` is the batch id already (a replay),
append each reported piece's stage hash to the feed (XADD) and delete it, drop members scored below
`max(max_time, the batch's largest result time) - retain_ms` (deterministic: event time, not the wall clock;
skipped with `trim=False`, when Parquet snapshots decide what may leave Redis, see `redis_tier.advance_snapshot`),
and set `committed`, `max_time` (and `since`). A batch id below `committed` is refused (`StaleBatchError`: ids of
one checkpoint only grow). Members of a batch above `committed` are staged, not results: every reader leaves
them out, so an answer is a union of whole committed batches. `write` stages one piece and commits it.

Members are encoded with Arrow compute and the ZADD commands are laid out in Redis' wire format the same way, so
no Python loop runs per row: 100k rows write in ~0.3 s on two busy cores, ~0.15 s of it inside Redis. A task's
keys share a Redis Cluster slot (the `{task}` hash tag), so each transaction and script stays on one shard.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import redis

from windjoin.connectors.redis_client import RedisAuth, redis_client
from windjoin.connectors.redis_namespace import DEFAULT_NAMESPACE, check_namespace
from windjoin.connectors.sink_owner import CheckpointId, OwnerRecordError, stale_batch
from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    check_batch_id,
    check_identifier,
    check_piece,
    check_result_table,
    piece_rows,
    result_times,
    stream_timestamps,
)

log = logging.getLogger(__name__)

# Members per ZADD command: bounds one command's size (Redis refuses a query buffer over 1 GB).
_ZADD_CHUNK = 50_000
# How often a write starts over when other writers keep changing the same tasks' meta hashes.
_MAX_ATTEMPTS = 16
# KEYS: meta, results, feed, the pieces' stage hashes. ARGV: batch id, the batch's largest result time ("" for
# none), retain ms ("" for no trim), feed entries kept, then each piece's entry sequence (piece + 1).
# Returns {1} committed, {0} a replay (committed before), {-1, committed} a stale batch id, {-2, key} a missing piece
# while the meta hash survived, {-3, key} a missing piece of a Redis that lost the task (meta hash gone too): the
# pieces still staged are dropped, members and all, and the batch is left uncommitted here (see `commit`).
_COMMIT = """
local committed = redis.call('HGET', KEYS[1], 'committed')
local b = tonumber(ARGV[1])
if committed and tonumber(committed) == b then return {0} end
if committed and tonumber(committed) > b then return {-1, committed} end
for i = 4, #KEYS do
  if tonumber(redis.call('HGET', KEYS[i], 'batch')) ~= b then
    if committed then return {-2, KEYS[i]} end
    for j = 4, #KEYS do
      local piece = redis.call('HMGET', KEYS[j], 'batch', 'members')
      if tonumber(piece[1]) == b then
        local doomed = {}
        for member in string.gmatch(piece[2], '[^\\n]+') do
          doomed[#doomed + 1] = member
          if #doomed >= 1000 then redis.call('ZREM', KEYS[2], unpack(doomed)); doomed = {} end
        end
        if #doomed > 0 then redis.call('ZREM', KEYS[2], unpack(doomed)) end
        redis.call('DEL', KEYS[j])
      end
    end
    return {-3, KEYS[i]}
  end
end
for i = 4, #KEYS do
  local piece = redis.call('HMGET', KEYS[i], 'emitted_at', 'members')
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], ARGV[1] .. '-' .. ARGV[i + 1], 'emitted_at', piece[1],
    'members', piece[2])
  redis.call('DEL', KEYS[i])
end
if not committed then redis.call('HSET', KEYS[1], 'since', ARGV[1]) end
redis.call('HSET', KEYS[1], 'committed', ARGV[1])
local max_time = tonumber(redis.call('HGET', KEYS[1], 'max_time'))
if ARGV[2] ~= '' and (not max_time or tonumber(ARGV[2]) > max_time) then max_time = tonumber(ARGV[2]) end
if max_time then
  redis.call('HSET', KEYS[1], 'max_time', string.format('%.0f', max_time))
  if ARGV[3] ~= '' then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', max_time - tonumber(ARGV[3])))
  end
end
return {1}
"""


def results_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The sorted set of `task`'s results (see the module docstring)."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:results"


def meta_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash of `task`'s commit state: `committed`, `max_time`."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:meta"


def feed_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The stream of `task`'s committed batches, the continuous-query feed (see the module docstring)."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:feed"


def stage_key(task: str, piece: int, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash of `task`'s staged, uncommitted piece `piece`: `batch`, `emitted_at`, `members`."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:stage:{check_piece(piece)}"


def stage_pattern(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A SCAN pattern of `task`'s stage hashes."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:stage:*"


def owner_key(task: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The hash naming the checkpoint that writes `task`'s keys: `run_id`, `checkpoint`."""
    return f"{check_namespace(namespace)}:{{{check_identifier('task name', task)}}}:owner"


def encode_members(table: pa.Table, piece: int = 0) -> pa.StringArray:
    """The sorted-set member of every pair of a result table, the piece `piece` of its batch, as JSON text (see
    the module docstring).

    Vectorised with Arrow compute (no per-row Python); equal to `orjson.dumps` of the same values.
    """
    batch_id = check_batch_id(int(table.column(BATCH_ID)[0].as_py())) if table.num_rows else 0
    rows = pc.cast(pa.array(piece_rows(piece, table.num_rows)), pa.string())
    parts: list[Any] = [f"[{batch_id},", rows, ",", _json_values(table.column(EMITTED_AT))]
    for i, stream in enumerate(stream_timestamps(table.schema)):
        column = table.column(stream)
        parts.append(f'{",{" if i == 0 else ","}"{stream}":')
        for j, field in enumerate(column.type):
            parts.append(f'{"{" if j == 0 else ","}"{field.name}":')
            parts.append(_json_values(pc.struct_field(column, [j])))
        parts.append("}")
    parts.append("}]")
    members = pc.binary_join_element_wise(*parts, "")
    members = members.combine_chunks() if isinstance(members, pa.ChunkedArray) else members
    if members.null_count:
        raise ValueError("result table holds nulls; results never do")
    return members


def _json_values(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """JSON text of every value: numbers as orjson writes them, strings quoted and escaped."""
    kind = values.type
    if pa.types.is_integer(kind):
        return pc.cast(values, pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(values, "true", "false")
    if pa.types.is_floating(kind):
        text = pc.cast(values, pa.string())  # shortest text that reads back as the same double
        integral = pc.match_substring_regex(text, r"^-?[0-9]+$")  # "3" would read back as an int: write "3.0"
        return pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = pc.replace_substring(values, "\\", "\\\\")
        text = pc.replace_substring(text, '"', '\\"')
        if pc.any(pc.match_substring_regex(text, r"[\x00-\x1f]")).as_py():
            for code in range(0x20):
                text = pc.replace_substring(text, chr(code), _CONTROL_ESCAPES.get(code, f"\\u{code:04x}"))
        return pc.binary_join_element_wise('"', text, '"', "")
    raise ValueError(f"no JSON text for Arrow type {kind} (result fields are int64, float64, string, bool)")


_CONTROL_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}


def decode_member(task: str, member: bytes) -> dict[str, Any]:
    """A stored result as `{"task", <stream>: {...}, ... (one per joined stream), "batch_id", "emitted_at",
    "result_time"}`."""
    result_time, batch_id, _row, emitted_at, sides = _decode(member)
    return {"task": task, **sides, "batch_id": batch_id, "emitted_at": emitted_at, "result_time": result_time}


def _decode(member: bytes) -> tuple[int, int, int, int, dict[str, dict[str, Any]]]:
    """(result time, batch id, row, emitted_at, sides); the result time is the latest of the sides' timestamps."""
    batch_id, row, emitted_at, sides = orjson.loads(member)
    return result_time_of(sides), batch_id, row, emitted_at, sides


def result_time_of(sides: Mapping[str, Mapping[str, Any]]) -> int:
    """The result time of a stored result: the latest of its tuples' timestamps (each side's first value), over
    however many streams the task joins."""
    return max(next(iter(side.values())) for side in sides.values())


class RedisSink:
    """The last `retain_ms` (of result time) of each task's results, in Redis, idempotent per (task, batch id)."""

    def __init__(
        self,
        url: str,
        retain_ms: int,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        socket_timeout: float = 60.0,
        trim: bool = True,
        feed_batches: int = 10_000,
        auth: RedisAuth | None = None,
    ) -> None:
        """`trim=False`: never drop results at write time (Parquet snapshots move them out, see
        `redis_tier.advance_snapshot`); `feed_batches`: how many batches the continuous-query feed keeps (about:
        Redis trims whole stream nodes)."""
        if isinstance(retain_ms, bool) or not isinstance(retain_ms, int) or retain_ms <= 0:
            raise ValueError(f"retain_ms {retain_ms!r} is not a positive int (milliseconds)")
        if isinstance(feed_batches, bool) or not isinstance(feed_batches, int) or feed_batches <= 0:
            raise ValueError(f"feed_batches {feed_batches!r} is not a positive int (batches)")
        self.retain_ms = retain_ms
        self.trim = bool(trim)
        self.feed_batches = feed_batches
        self.namespace = check_namespace(namespace)
        # redis-py's default (5 s) is too short for a batch of a million rows on a busy machine; the URL's
        # `?socket_timeout=` still wins.
        self.url, self.socket_timeout, self.auth = url, socket_timeout, auth
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled into the join's slots (they stage on the executors) without the client."""
        return {k: v for k, v in self.__dict__.items() if k != "client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = _worker_client(self.url, self.socket_timeout, self.auth)

    def close(self) -> None:
        self.client.close()

    @property
    def name(self) -> str:
        """The sink (server and namespace, never credentials), for messages and metric labels."""
        return f"Redis {self._server()} namespace {self.namespace}"

    def location(self, task: str) -> str:
        """Where `task`'s results are, for messages."""
        return f"Redis {self._server()} key {results_key(task, self.namespace)}"

    def _server(self) -> str:
        kwargs = self.client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        return f"{where}/{kwargs.get('db', 0)}"

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage each task's result table for `batch_id` as piece 0 and commit it; returns rows written per task
        committed by this call (a task whose committed batch id is `batch_id` is skipped: a replay).
        StaleBatchError when one's is above it."""
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        self.stage(batch_id, 0, {task: table for task, table in tables.items() if table.num_rows})
        batch_max = {task: int(result_times(t).max()) for task, t in tables.items() if t.num_rows}
        pieces = {t: [0] if x.num_rows else [] for t, x in tables.items()}
        committed = self.commit(batch_id, pieces, batch_max=batch_max)
        return {task: tables[task].num_rows for task in committed}

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage one slot's piece of `batch_id` per task (see the module docstring); returns rows staged per task
        by this call. Tasks of a committed batch, and pieces an earlier attempt staged, are left as they are."""
        batch_id, piece = check_batch_id(batch_id), check_piece(piece)
        staged = {}
        for task, table in tables.items():
            check_result_table(table, batch_id, task)
            if table.num_rows and self._stage(task, batch_id, piece, table):
                staged[task] = table.num_rows
        return staged

    def _stage(self, task: str, batch_id: int, piece: int, table: pa.Table) -> bool:
        meta, stage = meta_key(task, self.namespace), stage_key(task, piece, self.namespace)
        members = encode_members(table, piece)
        with self._connection() as conn:
            for _ in range(_MAX_ATTEMPTS):
                conn.send_packed_command(
                    conn.pack_commands([("WATCH", meta, stage), ("HGET", meta, "committed"), ("HGET", stage, "batch")])
                )
                conn.read_response()
                committed, staged = conn.read_response(), conn.read_response()
                if committed is not None and int(committed) > batch_id:
                    self._unwatch(conn)
                    raise stale_batch(self.name, task, batch_id, int(committed))
                if (committed is not None and int(committed) == batch_id) or (
                    staged is not None and int(staged) == batch_id
                ):
                    self._unwatch(conn)
                    return False
                _, zadds = _packed_zadds(results_key(task, self.namespace), table, members)
                joined = pc.binary_join(
                    pa.ListArray.from_arrays(pa.array([0, len(members)], pa.int32()), members), "\n"
                )
                emitted_at = int(table.column(EMITTED_AT)[0].as_py())
                commands = [conn.pack_command("MULTI"), *zadds, conn.pack_command("DEL", stage)]
                commands.append(
                    conn.pack_command(
                        "HSET", stage, "batch", batch_id, "emitted_at", emitted_at, "members", _string_bytes(joined)
                    )
                )
                commands.append(conn.pack_command("EXEC"))
                conn.send_packed_command([part for command in commands for part in command])
                for _ in commands[:-1]:
                    conn.read_response()  # +OK, then +QUEUED per command (an error reply raises here)
                replies = conn.read_response()
                if replies is None:  # a watched key changed meanwhile: look again
                    continue
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise reply
                return True
        raise RuntimeError(f"batch {batch_id}: gave up after {_MAX_ATTEMPTS} attempts; other writers kept racing")

    @staticmethod
    def _unwatch(conn: redis.Connection) -> None:
        conn.send_packed_command(conn.pack_command("UNWATCH"))
        conn.read_response()

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Sequence[int]],
        *,
        batch_max: Mapping[str, int],
        schemas: Mapping[str, pa.Schema] | None = None,
    ) -> list[str]:
        """Close `batch_id` for each task from its staged `pieces` (the slots that reported results), with the
        batch's largest result time per task that has rows (`batch_max`); returns the tasks committed by this
        call (`schemas` is for sinks that write empty batches out). A task whose committed batch id is `batch_id`
        is skipped (a replay); StaleBatchError when above.

        A reported piece that is not staged: when the task's commit record is gone too, Redis lost the task since
        the batch staged (restarted empty, flushed). The pieces left are dropped and the batch stays uncommitted
        here, so Redis holds whole batches only, from the next one on (`since`); the task counts as committed by
        this call, and a warning says so. With the commit record there (keys evicted or deleted), RuntimeError: the
        batch is not closed."""
        batch_id = check_batch_id(batch_id)
        committed = []
        for task, slots in pieces.items():
            slots = sorted(check_piece(p) for p in slots)
            keys = [meta_key(task, self.namespace), results_key(task, self.namespace), feed_key(task, self.namespace)]
            keys += [stage_key(task, p, self.namespace) for p in slots]
            top = batch_max.get(task)
            # the feed keeps about `feed_batches` batches of as many pieces as this one
            kept = self.feed_batches * max(1, len(slots))
            args = [batch_id, "" if top is None else int(top), self.retain_ms if self.trim else "", kept]
            reply = self.client.eval(_COMMIT, len(keys), *keys, *args, *(p + 1 for p in slots))
            status = int(reply[0])
            if status == -1:
                raise stale_batch(self.name, task, batch_id, int(reply[1]))
            if status == -2:
                raise RuntimeError(
                    f"{self.location(task)}: batch {batch_id} cannot be committed, staged piece missing: "
                    f"{reply[1].decode()} while the commit record survived (keys evicted or deleted: run Redis "
                    "with maxmemory-policy noeviction)"
                )
            if status == -3:
                log.warning(
                    "%s: Redis lost batch %d's staged results (%s gone with the commit record: restarted empty or "
                    "flushed since the batch staged); Redis holds this task's batches from %d on, Parquet answers "
                    "for the earlier ones",
                    self.location(task),
                    batch_id,
                    reply[1].decode(),
                    batch_id + 1,
                )
                committed.append(task)
            if status == 1:
                committed.append(task)
        return committed

    @contextlib.contextmanager
    def _connection(self) -> Iterator[redis.Connection]:
        """A pooled connection for a hand-pipelined exchange; dropped (never reused) if the exchange failed."""
        pool = self.client.connection_pool
        try:
            conn = pool.get_connection()
        except TypeError:  # redis-py < 5.3 wants a command name
            conn = pool.get_connection("MULTI")
        try:
            yield conn
        except BaseException:
            conn.disconnect()  # replies may be left unread and a WATCH or MULTI open: start afresh
            raise
        finally:
            pool.release(conn)

    def query(self, task: str, t_from: int, t_to: int) -> list[dict[str, Any]]:
        """The stored pairs with result time in [t_from, t_to], ordered by (result time, batch id, row).

        Each result: `{"task", <stream>: {...}, ... (one per joined stream), "batch_id", "emitted_at",
        "result_time"}`.
        """
        with self.client.pipeline(transaction=True) as pipe:  # the members and the commit mark they are judged by
            pipe.zrangebyscore(results_key(task, self.namespace), t_from, t_to)
            pipe.hget(meta_key(task, self.namespace), "committed")
            members, committed = pipe.execute()
        if committed is None:
            return []
        # scores are not fetched: each member holds its own; staged members of an open batch are left out
        decoded = [item for item in map(_decode, members) if item[1] <= int(committed)]
        decoded.sort(key=lambda item: item[:3])
        return [
            {"task": task, **sides, "batch_id": batch_id, "emitted_at": emitted_at, "result_time": result_time}
            for result_time, batch_id, _row, emitted_at, sides in decoded
        ]

    def last_committed(self, task: str) -> int | None:
        """The last batch id committed for `task`, or None before its first batch."""
        value = self.client.hget(meta_key(task, self.namespace), "committed")
        return None if value is None else int(value)

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task`'s keys, or None when none did."""
        key = owner_key(task, self.namespace)
        record = self.client.hgetall(key)
        if not record:
            return None
        try:
            return CheckpointId(record[b"run_id"].decode(), record[b"checkpoint"].decode())
        except (KeyError, ValueError) as err:
            raise OwnerRecordError(
                f"Redis key {key}: not an owner record ({err}); delete it to let a job claim the task"
            ) from None

    def holds_results(self, task: str) -> bool:
        """Whether `task` has anything committed (results, commit record, feed), whoever wrote it."""
        keys = (results_key(task, self.namespace), meta_key(task, self.namespace), feed_key(task, self.namespace))
        return bool(self.client.exists(*keys))

    def clear(self, task: str) -> None:
        """Delete `task`'s results, commit record (with its snapshot marker), feed and owner, in one command."""
        keys = [f(task, self.namespace) for f in (results_key, meta_key, feed_key, owner_key)]
        keys += self.client.scan_iter(match=stage_pattern(task, self.namespace), count=1000)
        self.client.delete(*keys)

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint` as the writer of `task`'s keys."""
        key = owner_key(task, self.namespace)
        with self.client.pipeline(transaction=True) as pipe:  # the old record or the new one, never a mix
            pipe.delete(key)
            pipe.hset(key, mapping={"run_id": checkpoint.run_id, "checkpoint": checkpoint.path})
            pipe.execute()

    def max_time(self, task: str) -> int | None:
        """The largest result time seen for `task` (the retention bound is this minus retain_ms)."""
        value = self.client.hget(meta_key(task, self.namespace), "max_time")
        return None if value is None else int(value)

    def count(self, task: str) -> int:
        """How many pairs of `task` are stored."""
        return int(self.client.zcard(results_key(task, self.namespace)))


# One client (and connection pool) per Redis per Python worker process, kept across batches.
_CLIENTS: dict[tuple[str, float, RedisAuth | None], redis.Redis] = {}  # per worker process, by server and user


def _worker_client(url: str, socket_timeout: float, auth: RedisAuth | None) -> redis.Redis:
    """One client per worker process and server (the password is read here, on the executor, from its file)."""
    key = (url, socket_timeout, auth)
    if key not in _CLIENTS:
        _CLIENTS[key] = redis_client(url, auth, socket_timeout=socket_timeout)
    return _CLIENTS[key]


def _packed_zadds(key: str, table: pa.Table, members: pa.StringArray | None) -> tuple[int | None, list[Any]]:
    """The batch's largest result time and its ZADD commands in Redis' wire format, built with Arrow compute.

    redis-py would pack argument by argument in Python (about as long as Redis takes to apply them); here every
    `$<length>\\r\\n<score>\\r\\n$<length>\\r\\n<member>\\r\\n` is built for all rows at once.
    """
    if members is None:
        return None, []
    times = result_times(table)
    scores = pc.cast(pa.array(times), pa.string())
    commands = []
    for start in range(0, table.num_rows, _ZADD_CHUNK):
        score, member = scores[start : start + _ZADD_CHUNK], members[start : start + _ZADD_CHUNK]
        body = pc.binary_join_element_wise(
            "$", _length_text(score), "\r\n", score, "\r\n$", _length_text(member), "\r\n", member, "\r\n", ""
        )
        head = f"*{2 + 2 * len(body)}\r\n$4\r\nZADD\r\n${len(key.encode())}\r\n{key}\r\n".encode()
        commands.append([head, _string_bytes(body)])
    return int(times.max()), commands


def _length_text(texts: pa.Array) -> pa.Array:
    return pc.cast(pc.binary_length(texts), pa.string())


def _string_bytes(texts: pa.StringArray) -> memoryview:
    """The concatenated UTF-8 bytes of a string array, without copying."""
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int32)
    start, stop = offsets[texts.offset], offsets[texts.offset + len(texts)]
    return memoryview(texts.buffers()[2])[start:stop]
