"""The Redis layout before issue 30, kept to measure beside today's (benchmarks.output_path): one sorted-set member
per pair (compact JSON scored by result time), each piece's members staged in a hash and copied into the feed
stream at commit. A frozen copy of the old `connectors/redis/sink.py`'s write path (stage and commit), nothing else:
it is not part of windjoin and nothing reads what it writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from windjoin.connectors.redis.client import redis_client
from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    check_batch_id,
    piece_rows,
    result_times,
    stream_timestamps,
)

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


class PairLayoutSink:
    """Today's sink interface (`stage` on a slot, `commit` on the driver) writing the old layout under `namespace`."""

    def __init__(self, url: str, namespace: str, feed_batches: int = 10_000) -> None:
        self.url, self.namespace, self.feed_batches = url, namespace, feed_batches
        self.name = f"Redis (pairs) namespace {namespace}"
        self.client = redis_client(url, socket_timeout=60.0)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.client = redis_client(self.url, socket_timeout=60.0)

    def _key(self, task: str, what: str) -> str:
        return f"{self.namespace}:{{{task}}}:{what}"

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        staged = {}
        for task, table in tables.items():
            if table.num_rows and self._stage(task, batch_id, piece, table):
                staged[task] = table.num_rows
        return staged

    def _stage(self, task: str, batch_id: int, piece: int, table: pa.Table) -> bool:
        meta, stage = self._key(task, "meta"), self._key(task, f"stage:{piece}")
        members = encode_members(table, piece)
        with self._connection() as conn:
            for _ in range(_MAX_ATTEMPTS):
                conn.send_packed_command(
                    conn.pack_commands([("WATCH", meta, stage), ("HGET", meta, "committed"), ("HGET", stage, "batch")])
                )
                conn.read_response()
                committed, staged = conn.read_response(), conn.read_response()
                if (committed is not None and int(committed) == batch_id) or (
                    staged is not None and int(staged) == batch_id
                ):
                    self._unwatch(conn)
                    return False
                _, zadds = _packed_zadds(self._key(task, "results"), table, members)
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
        """Close `batch_id` per task from its staged pieces (the old commit script: members to the feed, no trim)."""
        committed = []
        for task, slots in pieces.items():
            slots = sorted(slots)
            keys = [self._key(task, k) for k in ("meta", "results", "feed")]
            keys += [self._key(task, f"stage:{p}") for p in slots]
            top = batch_max.get(task)
            kept = self.feed_batches * max(1, len(slots))
            args = [batch_id, "" if top is None else int(top), "", kept]
            reply = self.client.eval(_COMMIT, len(keys), *keys, *args, *(p + 1 for p in slots))
            if int(reply[0]) < 0:
                raise RuntimeError(f"batch {batch_id}: the old layout's commit refused it ({reply})")
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

    def clear(self, task: str) -> None:
        self.client.delete(*(self._key(task, k) for k in ("meta", "results", "feed")))


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
