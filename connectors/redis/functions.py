"""The product's Lua code as one Redis Functions library (`windjoin`), and how components call it.

Components may run only these vetted functions (ACL `+fcall` / `+fcall_ro`), never EVAL, SCRIPT or FUNCTION: a
user who may EVAL runs any code it likes (a busy loop blocks every client with BUSY), and one who may FUNCTION
LOAD/FLUSH changes what every other user runs. Whoever administers the Redis loads the library (`load_library`):
the embedded services at start-up, the chart's Redis pod with its admin user, `windjoin redis-functions` for a
Redis you run yourself. Functions run as the calling user, so each call inside them is checked against its ACL.

Read-only functions carry `no-writes`, so the query proxy calls them with FCALL_RO, which declares its keys
read-only: the proxy's user needs only read access to the result keys. Needs Redis 7.0 or later.

Every function does a bounded amount of work a call (readers step through spans, retention drops at most
`PIECES_PER_CALL` pieces), so none holds Redis for more than milliseconds. `BUSY_REPLY_MS` is what the Redis we run
is given as `busy-reply-threshold` (set explicitly, not left to an image's redis.conf): the time after which a
running function makes Redis answer others BUSY and becomes killable (FUNCTION KILL, the admin's). It stops
nothing; it chooses between queueing and erroring. Below it, the job's calls wait (socket timeouts 10-60 s) rather
than fail a batch over a slow call; beyond it, a function that ran away from its bound (a bug: no component can
submit code) can be stopped within seconds.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from typing import Any

import redis

BUSY_REPLY_MS = 5000

_FUNCTIONS = """#!lua name=windjoin

-- KEYS: a piece, staged. ARGV: batch id, the piece's `batch:piece`. Marks a piece Redis refused for memory, named
-- in the staged set as any piece (allowed past maxmemory: a few bytes).
redis.register_function{function_name='windjoin_refuse', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  redis.call('UNLINK', KEYS[1])
  redis.call('HSET', KEYS[1], 'batch', ARGV[1], 'refused', '1')
  redis.call('SADD', KEYS[2], ARGV[2])
  return 1
end}

-- KEYS: meta, index, pieces, feed, staged, the pieces' hashes. ARGV: batch id, the batch's largest result time
-- ("" for none), feed entries kept, then each piece's number. Returns {1, max_time} committed, {0} a replay
-- (committed before), {-1, committed} a stale batch id, {-2, key} a missing piece while the meta hash survived,
-- {-3, key} a missing piece of a Redis that lost the task (meta hash gone too: the batch's pieces are dropped and
-- the batch is left uncommitted here), {-4} a piece refused for memory (the batch is left to Parquet).
-- Allowed past maxmemory: it adds entries of a few bytes per chunk, and must be able to record a refusal.
redis.register_function{function_name='windjoin_commit', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  local meta, index, pieces, feed, staged = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  local b = tonumber(ARGV[1])
  local committed = redis.call('HGET', meta, 'committed')
  if committed and tonumber(committed) == b then return {0} end
  if committed and tonumber(committed) > b then return {-1, committed} end
  local members = {}
  for i = 6, #KEYS do members[#members + 1] = ARGV[1] .. ':' .. ARGV[i - 2] end
  local function forget()
    for j = 6, #KEYS do redis.call('UNLINK', KEYS[j]) end
    if #members > 0 then redis.call('SREM', staged, unpack(members)) end
  end
  local refused = false
  for i = 6, #KEYS do
    local p = redis.call('HMGET', KEYS[i], 'chunks', 'refused')
    if p[2] then refused = true
    elseif not p[1] then
      if committed then return {-2, KEYS[i]} end
      forget()
      return {-3, KEYS[i]}
    end
  end
  if refused then
    forget()
    redis.call('HSET', meta, 'committed', ARGV[1], 'since', b + 1, 'full_pending', '1')
    redis.call('HDEL', meta, 'snapshot', 'snapshot_batch')
    redis.call('HINCRBY', meta, 'full_batches', 1)
    return {-4}
  end
  local bytes, rows = 0, 0
  local width = tonumber(redis.call('HGET', meta, 'width') or '0')
  for i = 6, #KEYS do
    local p = redis.call('HMGET', KEYS[i], 'emitted_at', 'rows', 'bytes', 'max', 'width', 'chunks', 'index')
    local entries = {}
    for entry in string.gmatch(p[7], '%S+') do
      entries[#entries + 1] = string.match(entry, '^%d+:%d+:%d+:(%-?%d+):')
      entries[#entries + 1] = entry
      if #entries >= 2000 then redis.call('ZADD', index, unpack(entries)); entries = {} end
    end
    if #entries > 0 then redis.call('ZADD', index, unpack(entries)) end
    local piece = ARGV[i - 2]
    redis.call('ZADD', pieces, p[4], ARGV[1] .. ':' .. piece)
    redis.call('XADD', feed, 'MAXLEN', '~', ARGV[3], ARGV[1] .. '-' .. (tonumber(piece) + 1), 'emitted_at', p[1],
      'rows', p[2], 'chunks', p[6])
    bytes, rows = bytes + tonumber(p[3]), rows + tonumber(p[2])
    if tonumber(p[5]) > width then width = tonumber(p[5]) end
  end
  if #members > 0 then redis.call('SREM', staged, unpack(members)) end
  if not committed then redis.call('HSET', meta, 'since', ARGV[1]) end
  redis.call('HSET', meta, 'committed', ARGV[1], 'width', string.format('%.0f', width))
  redis.call('HINCRBY', meta, 'bytes', bytes)
  redis.call('HINCRBY', meta, 'rows', rows)
  local max_time = tonumber(redis.call('HGET', meta, 'max_time'))
  if ARGV[2] ~= '' and (not max_time or tonumber(ARGV[2]) > max_time) then max_time = tonumber(ARGV[2]) end
  if max_time then
    max_time = string.format('%.0f', max_time)
    redis.call('HSET', meta, 'max_time', max_time)
  end
  return {1, max_time or false}
end}

-- KEYS: meta, index, pieces. ARGV: key prefix, last batch that may leave ("" for any), time cutoff ("" for none:
-- pieces whose every result is older leave), max bytes ("" for none: the oldest pieces by result time leave, but
-- never the newest committed batch's), "1" to drop every piece up to the last batch, pieces per call.
-- Returns {pieces dropped, 1 when it stopped at the per-call bound}.
redis.register_function{function_name='windjoin_drop', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  local meta, index, pieces = KEYS[1], KEYS[2], KEYS[3]
  local upto, cutoff, max_bytes = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
  local everything, limit = ARGV[5] == '1', tonumber(ARGV[6])
  local committed = tonumber(redis.call('HGET', meta, 'committed'))
  local high = tonumber(redis.call('HGET', meta, 'dropped_upto') or '-1')
  local dropped = 0
  local function batch_of(member) return tonumber(string.match(member, '^(%d+):')) end
  local function drop(member)
    local key = ARGV[1] .. 'piece:' .. member
    local p = redis.call('HMGET', key, 'bytes', 'rows', 'index')
    local doomed = {}
    for entry in string.gmatch(p[3] or '', '%S+') do
      doomed[#doomed + 1] = entry
      if #doomed >= 1000 then redis.call('ZREM', index, unpack(doomed)); doomed = {} end
    end
    if #doomed > 0 then redis.call('ZREM', index, unpack(doomed)) end
    redis.call('UNLINK', key)
    redis.call('ZREM', pieces, member)
    redis.call('HINCRBY', meta, 'bytes', -tonumber(p[1] or '0'))
    redis.call('HINCRBY', meta, 'rows', -tonumber(p[2] or '0'))
    if batch_of(member) > high then high = batch_of(member) end
    dropped = dropped + 1
  end
  local function sweep(low, high_score, newest_too, enough)
    local offset = 0
    while dropped < limit and not enough() do
      local some = redis.call('ZRANGE', pieces, low, high_score, 'BYSCORE', 'LIMIT', offset, 100)
      if #some == 0 then return end
      for _, member in ipairs(some) do
        if dropped >= limit or enough() then return end
        local batch = batch_of(member)
        if (not upto or batch <= upto) and (newest_too or batch ~= committed) then drop(member)
        else offset = offset + 1 end
      end
    end
  end
  local function never() return false end
  if everything then sweep('-inf', '+inf', true, never) end
  if cutoff ~= '' then sweep('-inf', '(' .. cutoff, true, never) end
  if max_bytes then
    sweep('-inf', '+inf', false, function() return tonumber(redis.call('HGET', meta, 'bytes') or '0') <= max_bytes end)
  end
  if high >= 0 then redis.call('HSET', meta, 'dropped_upto', high) end
  return {dropped, dropped >= limit and 1 or 0}
end}

-- KEYS: meta. ARGV: snapshot id, its last batch. Records the snapshot as the boundary unless the recorded one is
-- at or past it; returns -1 then, else 1, or 2 when a batch was refused for memory since the last snapshot (then
-- every piece inside this snapshot leaves Redis). Allowed past maxmemory: it moves the boundary that frees memory.
redis.register_function{function_name='windjoin_advance', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  local recorded = tonumber(redis.call('HGET', KEYS[1], 'snapshot'))
  local recorded_batch = tonumber(redis.call('HGET', KEYS[1], 'snapshot_batch'))
  if (recorded and recorded >= tonumber(ARGV[1])) or (recorded_batch and recorded_batch > tonumber(ARGV[2])) then
    return -1
  end
  redis.call('HSET', KEYS[1], 'snapshot', ARGV[1], 'snapshot_batch', ARGV[2])
  if redis.call('HGET', KEYS[1], 'full_pending') then
    redis.call('HDEL', KEYS[1], 'full_pending')
    return 2
  end
  return 1
end}

local function micros_since(t0)
  local t1 = redis.call('TIME')
  return (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])
end

-- One step of a span's index. KEYS: index, meta. ARGV: from, to, resume entry ("" to start), step. Returns the
-- meta hash's {snapshot, snapshot_batch, committed}, lost (1: the resume entry is gone), at most `step` entries of
-- chunks that may hold result times in [from, to] (smallest time in [from - widest chunk, to]) in (score, entry)
-- order, from the start or just after the resume entry (by rank: O(log N)), and the microseconds it ran.
redis.register_function{function_name='windjoin_index_step', flags={'no-writes'}, callback=function(KEYS, ARGV)
  local t0 = redis.call('TIME')
  local meta = redis.call('HMGET', KEYS[2], 'snapshot', 'snapshot_batch', 'committed', 'width')
  local low = tonumber(ARGV[1]) - tonumber(meta[4] or '0')
  local first
  if ARGV[3] ~= '' then
    local rank = redis.call('ZRANK', KEYS[1], ARGV[3])
    if not rank then return {meta, 1, {}, micros_since(t0)} end
    first = rank + 1
  else
    first = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. string.format('%.0f', low))
  end
  local last = math.min(first + tonumber(ARGV[4]), redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[2])) - 1
  if last < first then return {meta, 0, {}, micros_since(t0)} end
  return {meta, 0, redis.call('ZRANGE', KEYS[1], first, last), micros_since(t0)}
end}

-- KEYS: a piece. ARGV: a chunk's field. The chunk (false when the piece is gone) and the microseconds it took.
redis.register_function{function_name='windjoin_chunk', flags={'no-writes'}, callback=function(KEYS, ARGV)
  local t0 = redis.call('TIME')
  local data = redis.call('HGET', KEYS[1], ARGV[1])
  return {data, micros_since(t0)}
end}

-- KEYS: feed. The feed's first entry id, last generated id, entries ever added and length, without sending any
-- entry's payload over the wire (XINFO STREAM includes the first and last entries).
redis.register_function{function_name='windjoin_feed_info', flags={'no-writes'}, callback=function(KEYS, ARGV)
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
end}

-- KEYS: feed. ARGV: start id. The id and `emitted_at` of the first entry at or after the id (payload left out).
redis.register_function{function_name='windjoin_entry_head', flags={'no-writes'}, callback=function(KEYS, ARGV)
  local entry = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', 1)[1]
  if not entry then return false end
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'emitted_at' then return {entry[1], fields[i + 1]} end
  end
  return {entry[1], false}
end}
"""


# The library's version is its code's digest, returned by `windjoin_version`: a Redis holding another windjoin's
# library (an upgrade, a downgrade) is found before any of its functions is called with the wrong arguments.
LIBRARY_VERSION = hashlib.sha256(_FUNCTIONS.encode()).hexdigest()[:16]
LIBRARY = (
    _FUNCTIONS
    + "\n-- The library's version (the digest of the code above): clients check it before their first call.\n"
    + "redis.register_function{function_name='windjoin_version', flags={'no-writes'}, callback=function()\n"
    + f"  return '{LIBRARY_VERSION}'\nend}}\n"
)

_checked: weakref.WeakSet[redis.Redis] = weakref.WeakSet()  # clients that found this library's version


class MissingLibraryError(RuntimeError):
    """The Redis has no `windjoin` function library, or another version of it, and this user may not load it."""


def load_library(client: redis.Redis) -> None:
    """Load (or replace) the library; needs a user allowed FUNCTION LOAD (the Redis' administrator)."""
    client.function_load(LIBRARY, replace=True)


def fcall(client: redis.Redis, function: str, keys: Sequence[Any], args: Sequence[Any], *, read_only: bool = False):
    """Call one of the library's functions (FCALL_RO when `read_only`), once the client found this version of the
    library (`ensure_library`)."""
    if client not in _checked:
        ensure_library(client)
    if read_only:
        return client.fcall_ro(function, len(keys), *keys, *args)
    return client.fcall(function, len(keys), *keys, *args)


def ensure_library(client: redis.Redis) -> None:
    """Check that the Redis holds this version of the library; load it when it does not and this user may (a
    Redis you run without ACL users), else MissingLibraryError saying what is there and how to load it."""
    found = _loaded_version(client)
    if found != LIBRARY_VERSION:
        try:
            load_library(client)
        except redis.ResponseError as err:  # this user may not (ACL users), or Redis refused it (maxmemory)
            held = "no windjoin function library" if found is None else f"windjoin function library {found}"
            why = "" if isinstance(err, redis.exceptions.NoPermissionError) else f" (loading it here failed: {err})"
            raise MissingLibraryError(
                f"Redis has {held}, this windjoin needs {LIBRARY_VERSION}{why}: load it as the Redis' administrator "
                "(`windjoin redis-functions | redis-cli --user ADMIN -x FUNCTION LOAD REPLACE`; the embedded "
                "services and the chart's Redis pod load it at start-up)"
            ) from None
    _checked.add(client)


def _loaded_version(client: redis.Redis) -> str | None:
    try:
        found = client.fcall_ro("windjoin_version", 0)
    except redis.ResponseError as err:
        if "function not found" in str(err).lower():
            return None
        raise
    return found.decode() if isinstance(found, bytes) else str(found)
