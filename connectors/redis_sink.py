"""Keeping each task's recent results in Redis, written at most once per (task, batch id), queryable by time.

Data layout per task (`ns` is the namespace, default "windjoin"; `{task}` is a Redis Cluster hash tag, so a
task's keys share one slot):

- `ns:{task}:results` - sorted set. Score: the pair's result time (max of its two tuples' timestamps, epoch ms;
  exact as a double up to 2^53). Member: the pair as compact JSON, an array
  `[batch_id, row, emitted_at, {"<stream>": {field: value, ...}, "<stream>": {...}}]`, streams in join order,
  each stream's timestamp first. `(batch_id, row)` makes every member unique, so equal pairs from different rows
  never collapse. A time-span query is one `ZRANGE key t_from t_to BYSCORE`; among equal scores Redis orders
  members bytewise, so readers that need (result time, batch id, row) order sort the decoded members (`query`
  does).
- `ns:{task}:meta` - hash: `committed` (last committed batch id), `max_time` (largest result time seen).

Exactly-once, fenced by `committed` with an optimistic transaction: WATCH the tasks' meta hashes, read them,
then in one MULTI/EXEC per batch (all tasks) add each task's members (ZADD), raise `max_time`, drop members
scored below `max_time - retain_ms` (deterministic: event time, not the wall clock) and set `committed`. A task
whose `committed` is >= the batch id is left out (a replay, or an older batch). If another writer changed a meta
hash in between, EXEC fails and the write starts over, so the check and the data are applied together or not at
all. A write costs three round trips per batch (WATCH, read, MULTI..EXEC), whatever the number of rows or tasks.
(A single Lua script per task would save two round trips but was measured to keep Redis busy 2-4x longer: its
arguments cross into Lua and back, while a plain ZADD is parsed once. Redis runs one command at a time, so that
time also delays the query proxy.)

Members are encoded with Arrow compute (no per-row Python) and sent with hiredis' packer: ~0.3 s per 100k rows
on two busy cores, ~0.1 s of it inside Redis. Standalone Redis (or one shard): a batch's transaction spans its
tasks' keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import redis

from windjoin.connectors.result_table import (
    BATCH_ID,
    EMITTED_AT,
    check_batch_id,
    check_identifier,
    check_result_table,
    result_times,
    stream_timestamps,
)

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


def decode_member(task: str, member: bytes, score: float) -> dict[str, Any]:
    """A stored pair as `{"task", <stream>: {...}, <stream>: {...}, "batch_id", "emitted_at", "result_time"}`."""
    return _pair(task, orjson.loads(member), score)


def _pair(task: str, value: list[Any], score: float) -> dict[str, Any]:
    batch_id, _row, emitted_at, sides = value
    return {"task": task, **sides, "batch_id": batch_id, "emitted_at": emitted_at, "result_time": int(score)}


class RedisSink:
    """The last `retain_ms` (of result time) of each task's results, in Redis, idempotent per (task, batch id)."""

    def __init__(self, url: str, retain_ms: int, namespace: str = "windjoin") -> None:
        if isinstance(retain_ms, bool) or not isinstance(retain_ms, int) or retain_ms <= 0:
            raise ValueError(f"retain_ms {retain_ms!r} is not a positive int (milliseconds)")
        self.retain_ms = retain_ms
        self.namespace = _namespace(namespace)
        self.client = redis.Redis.from_url(url)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Commit each task's result table for `batch_id`; returns rows written per task committed by this call.

        Tasks whose committed batch id is >= `batch_id` are skipped (absent from the returned mapping).
        """
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        if not tables:
            return {}
        tasks = list(tables)
        metas = [meta_key(task, self.namespace) for task in tasks]
        encoded: dict[str, tuple[list[int], list[bytes]]] = {}  # kept across attempts
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(_MAX_ATTEMPTS):
                try:
                    pipe.watch(*metas)
                    state = pipe.eval(_READ_META, len(metas), *metas)
                    todo = [
                        (task, None if max_time is None else int(max_time))
                        for task, (committed, max_time) in zip(tasks, state, strict=True)
                        if committed is None or int(committed) < batch_id
                    ]
                    if not todo:
                        pipe.unwatch()
                        return {}
                    pipe.multi()
                    for task, max_time in todo:
                        if task not in encoded:
                            encoded[task] = _encode(tables[task])
                        self._queue(pipe, task, batch_id, max_time, *encoded[task])
                    pipe.execute()
                    return {task: tables[task].num_rows for task, _ in todo}
                except redis.WatchError:
                    continue
        raise RuntimeError(f"batch {batch_id}: gave up after {_MAX_ATTEMPTS} attempts; other writers kept racing")

    def _queue(
        self,
        pipe: redis.client.Pipeline,
        task: str,
        batch_id: int,
        max_time: int | None,
        times: list[int],
        members: list[bytes],
    ) -> None:
        """Queue one task's commit: its members, the new max_time and retention, the new committed batch id."""
        key = results_key(task, self.namespace)
        for start in range(0, len(members), _ZADD_CHUNK):
            args: list[Any] = [None] * (2 * len(members[start : start + _ZADD_CHUNK]))
            args[0::2] = times[start : start + _ZADD_CHUNK]
            args[1::2] = members[start : start + _ZADD_CHUNK]
            pipe.execute_command("ZADD", key, *args)
        if times:
            batch_max = max(times)
            max_time = batch_max if max_time is None else max(max_time, batch_max)
        meta = {"committed": batch_id}
        if max_time is not None:
            pipe.zremrangebyscore(key, "-inf", f"({max_time - self.retain_ms}")
            meta["max_time"] = max_time
        pipe.hset(meta_key(task, self.namespace), mapping=meta)

    def query(self, task: str, t_from: int, t_to: int) -> list[dict[str, Any]]:
        """The stored pairs with result time in [t_from, t_to], ordered by (result time, batch id, row).

        Each pair: `{"task", <stream>: {...}, <stream>: {...}, "batch_id", "emitted_at", "result_time"}`.
        """
        raw = self.client.zrangebyscore(results_key(task, self.namespace), t_from, t_to, withscores=True)
        decoded = [(score, orjson.loads(member)) for member, score in raw]
        decoded.sort(key=lambda item: (item[0], item[1][0], item[1][1]))  # (result time, batch id, row)
        return [_pair(task, value, score) for score, value in decoded]

    def last_committed(self, task: str) -> int | None:
        """The last batch id committed for `task`, or None before its first batch."""
        value = self.client.hget(meta_key(task, self.namespace), "committed")
        return None if value is None else int(value)

    def max_time(self, task: str) -> int | None:
        """The largest result time seen for `task` (the retention bound is this minus retain_ms)."""
        value = self.client.hget(meta_key(task, self.namespace), "max_time")
        return None if value is None else int(value)

    def count(self, task: str) -> int:
        """How many pairs of `task` are stored."""
        return int(self.client.zcard(results_key(task, self.namespace)))


def _encode(table: pa.Table) -> tuple[list[int], list[bytes]]:
    """Scores and members of a result table's pairs, in row order."""
    if not table.num_rows:
        return [], []
    members = encode_members(table).cast(pa.binary())  # bytes: no UTF-8 decoding on the way to the socket
    return result_times(table).tolist(), members.to_pylist()


def _namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} is not accepted (accepted: {NAMESPACE.pattern})")
    return namespace
