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
- `ns:{task}:feed` - stream, the continuous-query feed: one entry per batch that has rows, entry id
  `<batch_id>-1` (so the feed is in commit order and a (batch, row) cursor maps onto entry ids), fields
  `emitted_at` (the batch's emission time, epoch ms) and `members` (the batch's members in row order, joined by
  "\n"; JSON text never holds a raw newline). Capped with `MAXLEN ~ feed_batches`.
- `ns:{task}:owner` - hash: `run_id`, `checkpoint`, the checkpoint whose batches the task's keys hold
  (`sink_owner.CheckpointId`), set when a job claims the task (`pipelines.sink_fence`).

Exactly-once, fenced by `committed` with an optimistic transaction, in two round trips per batch whatever the
number of rows or tasks: (1) WATCH the tasks' meta hashes and read them; (2) MULTI, then for each task whose
`committed` is below the batch id: add its members (ZADD), drop members scored below `max(max_time, the batch's
largest result time) - retain_ms` (deterministic: event time, not the wall clock; skipped with `trim=False`,
when Parquet snapshots decide what may leave Redis, see `redis_tier.advance_snapshot`), append the batch to the
feed (XADD), set `committed` and `max_time`; EXEC. Tasks whose `committed` is the batch id are left out (a
replay); one past it refuses the write (`StaleBatchError`: ids of one checkpoint only grow). If another writer
changed a watched hash in between, EXEC does nothing and the write starts over, so the check and the data are
applied together or not at all. (One Lua script per task would save a round trip but was measured to keep Redis
busy 2-4x longer: its arguments cross into Lua and back, while a plain ZADD is parsed once; Redis runs one
command at a time, so that time also delays the query proxy.)

Members are encoded with Arrow compute and the ZADD commands are laid out in Redis' wire format the same way, so
no Python loop runs per row: 100k rows write in ~0.3 s on two busy cores, ~0.15 s of it inside Redis.
Standalone Redis (or a single shard): a batch's transaction spans its tasks' keys.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import redis

from windjoin.connectors.redis_client import RedisAuth, redis_client
from windjoin.connectors.result_table import (
    BATCH_ID,
    EMITTED_AT,
    check_batch_id,
    check_identifier,
    check_result_table,
    result_times,
    stream_timestamps,
)
from windjoin.connectors.sink_owner import CheckpointId, OwnerRecordError, stale_batch

NAMESPACE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# Members per ZADD command: bounds one command's size (Redis refuses a query buffer over 1 GB).
_ZADD_CHUNK = 50_000
# How often a write starts over when other writers keep changing the same tasks' meta hashes.
_MAX_ATTEMPTS = 16
# Reads every task's (committed, max_time) in one round trip.
_READ_META = """
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('HMGET', key, 'committed', 'max_time')
end
return out
"""


def results_key(task: str, namespace: str = "windjoin") -> str:
    """The sorted set of `task`'s results (see the module docstring)."""
    return f"{_namespace(namespace)}:{{{check_identifier('task name', task)}}}:results"


def meta_key(task: str, namespace: str = "windjoin") -> str:
    """The hash of `task`'s commit state: `committed`, `max_time`."""
    return f"{_namespace(namespace)}:{{{check_identifier('task name', task)}}}:meta"


def feed_key(task: str, namespace: str = "windjoin") -> str:
    """The stream of `task`'s committed batches, the continuous-query feed (see the module docstring)."""
    return f"{_namespace(namespace)}:{{{check_identifier('task name', task)}}}:feed"


def owner_key(task: str, namespace: str = "windjoin") -> str:
    """The hash naming the checkpoint that writes `task`'s keys: `run_id`, `checkpoint`."""
    return f"{_namespace(namespace)}:{{{check_identifier('task name', task)}}}:owner"


def encode_members(table: pa.Table) -> pa.StringArray:
    """The sorted-set member of every pair of a result table, as JSON text (see the module docstring).

    Vectorised with Arrow compute (no per-row Python); equal to `orjson.dumps` of the same values.
    """
    batch_id = check_batch_id(int(table.column(BATCH_ID)[0].as_py())) if table.num_rows else 0
    rows = pc.cast(pa.array(np.arange(table.num_rows, dtype=np.int64)), pa.string())
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
        namespace: str = "windjoin",
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
        self.namespace = _namespace(namespace)
        # redis-py's default (5 s) is too short for a batch of a million rows on a busy machine; the URL's
        # `?socket_timeout=` still wins.
        self.client = redis_client(url, auth, socket_timeout=socket_timeout)

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
        """Commit each task's result table for `batch_id`; returns rows written per task committed by this call.

        Tasks whose committed batch id is `batch_id` are skipped (absent from the returned mapping): a replay.
        StaleBatchError when one's is above it.
        """
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        if not tables:
            return {}
        tasks = list(tables)
        metas = [meta_key(task, self.namespace) for task in tasks]
        packed: dict[str, tuple[int | None, list[Any]]] = {}  # per task: batch max result time, ZADD + XADD
        with self._connection() as conn:
            for _ in range(_MAX_ATTEMPTS):
                # Round trip 1: watch the meta hashes and read them.
                conn.send_packed_command(
                    conn.pack_commands([("WATCH", *metas), ("EVAL", _READ_META, len(metas), *metas)])
                )
                conn.read_response()
                state = conn.read_response()
                for task, (committed, _) in zip(tasks, state, strict=True):
                    if committed is not None and int(committed) > batch_id:
                        conn.send_packed_command(conn.pack_command("UNWATCH"))
                        conn.read_response()
                        raise stale_batch(self.name, task, batch_id, int(committed))
                todo = [
                    (task, None if max_time is None else int(max_time), committed is None)
                    for task, (committed, max_time) in zip(tasks, state, strict=True)
                    if committed is None or int(committed) < batch_id
                ]
                if not todo:
                    conn.send_packed_command(conn.pack_command("UNWATCH"))
                    conn.read_response()
                    return {}
                # Round trip 2: the transaction; EXEC answers nil if a watched hash changed meanwhile.
                commands = [conn.pack_command("MULTI")]
                for task, max_time, first in todo:
                    if task not in packed:
                        members = encode_members(tables[task]) if tables[task].num_rows else None
                        batch_max, zadds = _packed_zadds(results_key(task, self.namespace), tables[task], members)
                        feed = self._feed_commands(conn, task, batch_id, tables[task], members)
                        packed[task] = (batch_max, zadds + feed)
                    batch_max, zadds = packed[task]
                    commands += zadds
                    commands += self._commit_commands(conn, task, batch_id, max_time, batch_max, first)
                commands.append(conn.pack_command("EXEC"))
                conn.send_packed_command([part for command in commands for part in command])
                for _ in commands[:-1]:
                    conn.read_response()  # +OK, then +QUEUED per command (an error reply raises here)
                replies = conn.read_response()
                if replies is None:
                    continue
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise reply
                return {task: tables[task].num_rows for task, _, _ in todo}
        raise RuntimeError(f"batch {batch_id}: gave up after {_MAX_ATTEMPTS} attempts; other writers kept racing")

    def _feed_commands(
        self, conn: redis.Connection, task: str, batch_id: int, table: pa.Table, members: pa.StringArray | None
    ) -> list[Any]:
        """The packed XADD appending a batch with rows to the task's feed (none for an empty batch)."""
        if members is None:
            return []
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(members)], pa.int32()), members), "\n")
        emitted_at = int(table.column(EMITTED_AT)[0].as_py())
        payload = _string_bytes(joined)
        command = conn.pack_command(
            "XADD",
            feed_key(task, self.namespace),
            "MAXLEN",
            "~",
            self.feed_batches,
            f"{batch_id}-1",
            "emitted_at",
            emitted_at,
            "members",
            payload,
        )
        return [command]

    def _commit_commands(
        self,
        conn: redis.Connection,
        task: str,
        batch_id: int,
        max_time: int | None,
        batch_max: int | None,
        first: bool,
    ) -> list[Any]:
        """Packed commands closing one task's batch: retention by the new max_time, then the commit record (with
        `since` when it is the first commit into this database, `first`)."""
        if batch_max is not None:
            max_time = batch_max if max_time is None else max(max_time, batch_max)
        record = ["committed", batch_id, *(["since", batch_id] if first else [])]
        if max_time is None:
            return [conn.pack_command("HSET", meta_key(task, self.namespace), *record)]
        commit = conn.pack_command("HSET", meta_key(task, self.namespace), *record, "max_time", max_time)
        if not self.trim:
            return [commit]
        bound = max_time - self.retain_ms
        return [conn.pack_command("ZREMRANGEBYSCORE", results_key(task, self.namespace), "-inf", f"({bound}"), commit]

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
        members = self.client.zrangebyscore(results_key(task, self.namespace), t_from, t_to)
        decoded = [_decode(member) for member in members]  # scores are not fetched: each member holds its own
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


def _namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} is not accepted (accepted: {NAMESPACE.pattern})")
    return namespace
