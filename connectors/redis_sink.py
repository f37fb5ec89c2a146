"""Keeping each task's recent results in Redis, written at most once per (task, batch id), queryable by time.

Data layout per task (`ns` is the namespace, default "windjoin"; `{task}` is a Redis Cluster hash tag, so a
task's keys share one slot and one script may touch them all):

- `ns:{task}:results` - sorted set. Score: the pair's result time (max of its two tuples' timestamps, epoch ms;
  exact as a double up to 2^53). Member: the pair as compact JSON (orjson), an array
  `[batch_id, row, emitted_at, {"<stream>": {field: value, ...}, "<stream>": {...}}]`, streams in join order.
  `(batch_id, row)` makes every member unique, so equal pairs from different rows never collapse. A time-span
  query is one `ZRANGE key t_from t_to BYSCORE`; among equal scores Redis orders members bytewise, so readers
  that need (result time, batch id, row) order sort the decoded members (`query` does).
- `ns:{task}:meta` - hash: `committed` (last committed batch id), `max_time` (largest result time seen).

Exactly-once: one Lua script per task and batch, run atomically by Redis, reads `committed`, skips the batch if
its id is <= it, else adds the members, raises `max_time`, drops members scored below `max_time - retain_ms`
(deterministic: event time, not the wall clock), and stores the new `committed` - all or nothing. A write sends
one script call per task, all tasks pipelined in one round trip.
"""

from __future__ import annotations

import itertools
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
# Lua's unpack() is limited by the C stack (LUAI_MAXCSTACK = 8000): one ZADD takes at most this many members.
_ZADD_CHUNK = 2000
# Members travel as newline-joined blobs (JSON text never holds a raw newline) of at most this many bytes each,
# well below Redis' 512 MB bulk-string limit.
_BLOB_BYTES = 64 << 20

# KEYS: results, meta. ARGV: batch id, retain_ms, largest result time in this batch ('' if none), then pairs of
# blobs: scores (decimal, comma-separated), members (newline-separated), in the same order.
# Returns {members added, members dropped by retention}, or {-1, 0} when the batch was already committed.
_WRITE_SCRIPT = """
local batch = tonumber(ARGV[1])
local committed = redis.call('HGET', KEYS[2], 'committed')
if committed and tonumber(committed) >= batch then
  return {-1, 0}
end
local added = 0
local args = {}
for k = 4, #ARGV, 2 do
  local scores = {}
  local n = 0
  for score in string.gmatch(ARGV[k], '[^,]+') do
    n = n + 1
    scores[n] = score
  end
  local i = 0
  local j = 0
  for member in string.gmatch(ARGV[k + 1], '[^\\n]+') do
    j = j + 1
    args[2 * i + 1] = scores[j]
    args[2 * i + 2] = member
    i = i + 1
    if i == ZADD_CHUNK then
      redis.call('ZADD', KEYS[1], unpack(args, 1, 2 * i))
      i = 0
    end
  end
  if i > 0 then
    redis.call('ZADD', KEYS[1], unpack(args, 1, 2 * i))
  end
  if j ~= n then
    return redis.error_reply('windjoin: ' .. n .. ' scores for ' .. j .. ' members')
  end
  added = added + n
end
local max_time = redis.call('HGET', KEYS[2], 'max_time')
if ARGV[3] ~= '' and (not max_time or tonumber(ARGV[3]) > tonumber(max_time)) then
  max_time = ARGV[3]
end
local dropped = 0
if max_time then
  local bound = tonumber(max_time) - tonumber(ARGV[2])
  dropped = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', bound))
  redis.call('HSET', KEYS[2], 'committed', ARGV[1], 'max_time', max_time)
else
  redis.call('HSET', KEYS[2], 'committed', ARGV[1])
end
return {added, dropped}
""".replace("ZADD_CHUNK", str(_ZADD_CHUNK))


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


def _blob_cuts(offsets: np.ndarray) -> list[int]:
    """Row boundaries splitting members (by their text offsets) into blobs of at most _BLOB_BYTES."""
    cuts = [0]
    n = len(offsets) - 1
    while cuts[-1] < n:
        start = cuts[-1]
        limit = offsets[start] + _BLOB_BYTES
        stop = int(np.searchsorted(offsets, limit, side="right")) - 1
        cuts.append(max(stop, start + 1))
    return cuts


def _joined(texts: pa.Array, separator: str) -> bytes:
    """One bytes object: the texts joined by `separator` (one Arrow call, no per-row Python)."""
    single = pa.ListArray.from_arrays(pa.array([0, len(texts)], pa.int32()), texts)
    return pc.binary_join(single, separator)[0].as_py().encode()


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
        self._sha = self.client.script_load(_WRITE_SCRIPT)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Commit each task's result table for `batch_id`; returns members added per task committed by this call.

        Tasks whose committed batch id is >= `batch_id` are skipped (absent from the returned mapping).
        One round trip for all tasks.
        """
        batch_id = check_batch_id(batch_id)
        calls = []
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
            calls.append((task, self._script_args(batch_id, table)))
        if not calls:
            return {}
        try:
            replies = self._run(calls)
        except redis.exceptions.NoScriptError:  # the server lost its script cache (restart, SCRIPT FLUSH)
            self._sha = self.client.script_load(_WRITE_SCRIPT)
            replies = self._run(calls)  # safe to repeat: batches that got through are fenced off now
        return {task: added for (task, _), (added, _dropped) in zip(calls, replies, strict=True) if added >= 0}

    def _run(self, calls: list[tuple[str, list[Any]]]) -> list[list[int]]:
        pipe = self.client.pipeline(transaction=False)
        for task, args in calls:
            pipe.evalsha(self._sha, 2, results_key(task, self.namespace), meta_key(task, self.namespace), *args)
        return pipe.execute()

    def _script_args(self, batch_id: int, table: pa.Table) -> list[Any]:
        times = result_times(table)
        args: list[Any] = [batch_id, self.retain_ms, int(times.max()) if len(times) else ""]
        if not len(times):
            return args
        members = encode_members(table)
        offsets = np.frombuffer(members.buffers()[1], dtype=np.int32)
        cuts = _blob_cuts(offsets[members.offset : members.offset + len(members) + 1])
        scores = pc.cast(pa.array(times), pa.string())
        for start, stop in itertools.pairwise(cuts):
            args.append(_joined(scores[start:stop], ","))
            args.append(_joined(members[start:stop], "\n"))
        return args

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


def _namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE.match(namespace):
        raise ValueError(f"namespace {namespace!r} is not accepted (accepted: {NAMESPACE.pattern})")
    return namespace
