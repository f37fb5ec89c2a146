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

-- Arguments are checked before anything is written (an error names the argument): keys of at most MAX_KEY_BYTES,
-- batch and piece numbers of at most 16 digits, the pieces of one commit at most MAX_PIECES, an index at most
-- MAX_INDEX_BYTES of entries of at most MAX_ENTRY_BYTES. Functions flagged allow-oom (they must work when Redis is
-- full: they record a refusal or free memory) only delete, or overwrite fixed fields of a task's meta hash that
-- already exists with values of a few bytes: whoever calls them cannot grow Redis past maxmemory by more than a few
-- fields per existing task.
local MAX_KEY_BYTES, MAX_PIECES, MAX_INDEX_BYTES, MAX_ENTRY_BYTES = 1024, 4096, 4194304, 200
local ENTRY = '^%d+:%d+:%d+:(%-?%d+):%-?%d+:%d+:%d+:%-?%d+:?%d*$'  -- a chunk entry (`redis.pieces`), its `min` captured

local function check(ok, what)
  if not ok then error({err = 'ERR windjoin: ' .. what}) end
end

local function keys_bounded(KEYS)
  for i = 1, #KEYS do
    check(#KEYS[i] <= MAX_KEY_BYTES, 'key ' .. i .. ' is longer than ' .. MAX_KEY_BYTES .. ' bytes')
  end
end

local function number(value, what)
  check(type(value) == 'string' and #value <= 16 and string.match(value, '^%d+$'),
    what .. ' is not a number of at most 16 digits')
  return tonumber(value)
end

local function signed(value, what)
  check(type(value) == 'string' and #value <= 20 and string.match(value, '^%-?%d+$'),
    what .. ' is not an integer of at most 20 characters')
  return tonumber(value)
end

local function prefix_of(key, suffix)
  check(string.sub(key, -#suffix) == suffix, 'a key not ending in "' .. suffix .. '"')
  return string.sub(key, 1, -#suffix - 1)
end

-- KEYS: meta. ARGV: batch id. Records that Redis refused a piece of the batch for memory, for its commit, in the
-- task's meta hash when there is one (a task Redis holds nothing of has nothing to mark: its commit finds the piece
-- gone, as after a Redis loss).
redis.register_function{function_name='windjoin_refuse', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  keys_bounded(KEYS)
  prefix_of(KEYS[1], ':meta')
  number(ARGV[1], 'ARGV[1] (batch id)')
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  redis.call('HSET', KEYS[1], 'refused', ARGV[1])
  return 1
end}

-- The pieces of a batch left to Parquet: forgotten, and the meta hash told that Redis holds the task's batches from
-- the next one on. Writes only fixed fields of an existing meta hash (see above).
local function leave_to_parquet(meta, staged, KEYS, members, b)
  for j = 6, #KEYS do redis.call('UNLINK', KEYS[j]) end
  if #members > 0 then redis.call('SREM', staged, unpack(members)) end
  redis.call('HSET', meta, 'committed', string.format('%.0f', b), 'since', string.format('%.0f', b + 1),
    'full_pending', '1')
  redis.call('HDEL', meta, 'snapshot', 'snapshot_batch', 'refused')
  redis.call('HINCRBY', meta, 'full_batches', 1)
end

-- The arguments of a commit or a leave, checked: the keys, the batch id and the members of its pieces.
local function batch_args(KEYS, ARGV)
  keys_bounded(KEYS)
  check(#KEYS - 5 <= MAX_PIECES, 'more than ' .. MAX_PIECES .. ' pieces')
  local prefix = prefix_of(KEYS[1], ':meta')
  local b = number(ARGV[1], 'ARGV[1] (batch id)')
  local members = {}
  for i = 6, #KEYS do
    number(ARGV[i - 2] or '', 'ARGV[' .. (i - 2) .. '] (piece)')
    members[#members + 1] = ARGV[1] .. ':' .. ARGV[i - 2]
    check(KEYS[i] == prefix .. ':piece:' .. members[#members], 'key ' .. i .. ' is not the piece ARGV names')
  end
  return b, members
end

-- KEYS: meta, staged, then as windjoin_commit. ARGV: batch id, "", "", then each piece's number. Leaves a batch
-- to Parquet because Redis is full (the sink calls it when windjoin_commit is refused for memory): returns {0} a
-- replay, {-1, committed} a stale batch id, {-3} a Redis that holds nothing of the task (the pieces are dropped,
-- the batch left uncommitted), {-4} left to Parquet.
redis.register_function{function_name='windjoin_leave', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  local b, members = batch_args(KEYS, ARGV)
  local meta, staged = KEYS[1], KEYS[5]
  local committed = redis.call('HGET', meta, 'committed')
  if committed and tonumber(committed) == b then return {0} end
  if committed and tonumber(committed) > b then return {-1, committed} end
  if redis.call('EXISTS', meta) == 0 then
    for j = 6, #KEYS do redis.call('UNLINK', KEYS[j]) end
    if #members > 0 then redis.call('SREM', staged, unpack(members)) end
    return {-3, KEYS[6] or meta}
  end
  leave_to_parquet(meta, staged, KEYS, members, b)
  return {-4}
end}

-- KEYS: meta, index, pieces, feed, staged, the pieces' hashes. ARGV: batch id, the batch's largest result time
-- ("" for none), feed entries kept, then each piece's number. Returns {1, max_time} committed, {0} a replay
-- (committed before), {-1, committed} a stale batch id, {-2, key} a missing piece while the meta hash survived,
-- {-3, key} a missing piece of a Redis that lost the task (meta hash gone too: the batch's pieces are dropped and
-- the batch is left uncommitted here), {-4} a piece refused for memory (the batch is left to Parquet).
-- Not allowed past maxmemory (Redis refuses the call with OOM; the sink then calls windjoin_leave): it adds the
-- pieces' index entries, at most MAX_INDEX_BYTES of them a piece, each checked before the first write.
redis.register_function{function_name='windjoin_commit', callback=function(KEYS, ARGV)
  local b, members = batch_args(KEYS, ARGV)
  local meta, index, pieces, feed, staged = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  if ARGV[2] ~= '' then signed(ARGV[2], 'ARGV[2] (largest result time)') end
  number(ARGV[3], 'ARGV[3] (feed entries kept)')
  local committed = redis.call('HGET', meta, 'committed')
  if committed and tonumber(committed) == b then return {0} end
  if committed and tonumber(committed) > b then return {-1, committed} end
  if redis.call('HGET', meta, 'refused') == ARGV[1] then
    leave_to_parquet(meta, staged, KEYS, members, b)
    return {-4}
  end
  local described = {}
  for i = 6, #KEYS do
    local p = redis.call('HMGET', KEYS[i], 'emitted_at', 'rows', 'bytes', 'max', 'width', 'chunks', 'index')
    if not p[6] then
      if committed then return {-2, KEYS[i]} end
      for j = 6, #KEYS do redis.call('UNLINK', KEYS[j]) end
      if #members > 0 then redis.call('SREM', staged, unpack(members)) end
      return {-3, KEYS[i]}
    end
    for f = 1, 6 do signed(p[f], 'piece ' .. ARGV[i - 2] .. ' field ' .. f) end
    check(p[7] and #p[7] <= MAX_INDEX_BYTES,
      'piece ' .. ARGV[i - 2] .. ': an index of more than ' .. MAX_INDEX_BYTES .. ' bytes')
    local entries, seen = {}, 0
    for entry in string.gmatch(p[7], '%S+') do
      local score = #entry <= MAX_ENTRY_BYTES and string.match(entry, ENTRY)
      check(score, 'piece ' .. ARGV[i - 2] .. ': an index entry that is not one')
      entries[#entries + 1] = score
      entries[#entries + 1] = entry
      seen = seen + 1
    end
    check(seen == tonumber(p[6]), 'piece ' .. ARGV[i - 2] .. ': its index does not list its chunks')
    described[i] = {p, entries}
  end
  local bytes, rows = 0, 0
  local width = tonumber(redis.call('HGET', meta, 'width') or '0')
  for i = 6, #KEYS do
    local p, entries = described[i][1], described[i][2]
    for start = 1, #entries, 2000 do
      redis.call('ZADD', index, unpack(entries, start, math.min(start + 1999, #entries)))
    end
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
-- Returns {pieces dropped, 1 when it stopped at the per-call bound}. Allowed past maxmemory: it frees memory (the
-- prefix must be the meta key's, so it drops the task's pieces only).
redis.register_function{function_name='windjoin_drop', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  keys_bounded(KEYS)
  local meta, index, pieces = KEYS[1], KEYS[2], KEYS[3]
  check(ARGV[1] .. 'meta' == meta, 'ARGV[1] (key prefix) is not the prefix of KEYS[1]')
  local upto = ARGV[2] ~= '' and number(ARGV[2], 'ARGV[2] (last batch)') or nil
  local cutoff = ARGV[3]
  if cutoff ~= '' then signed(cutoff, 'ARGV[3] (time cutoff)') end
  local max_bytes = ARGV[4] ~= '' and number(ARGV[4], 'ARGV[4] (max bytes)') or nil
  local everything, limit = ARGV[5] == '1', number(ARGV[6], 'ARGV[6] (pieces per call)')
  check(limit <= 1000, 'ARGV[6] (pieces per call) is above 1000')
  if redis.call('EXISTS', meta) == 0 then return {0, 0} end
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
-- every piece inside this snapshot leaves Redis). Allowed past maxmemory: it moves the boundary that frees memory
-- (in a meta hash that exists: -1 for a task Redis holds nothing of).
redis.register_function{function_name='windjoin_advance', flags={'allow-oom'}, callback=function(KEYS, ARGV)
  keys_bounded(KEYS)
  prefix_of(KEYS[1], ':meta')
  number(ARGV[1], 'ARGV[1] (snapshot id)')
  number(ARGV[2], 'ARGV[2] (last batch)')
  if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
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
  local members = redis.call('ZRANGE', KEYS[1], first, last)
  for i, member in ipairs(members) do  -- an entry is ~100 bytes: a longer member is cut (and is not an entry)
    if #member > MAX_ENTRY_BYTES then members[i] = string.sub(member, 1, 60) .. '...' end
  end
  return {meta, 0, members, micros_since(t0)}
end}

-- KEYS: a piece. ARGV: a field (a chunk, or `index`), the most bytes the reader takes. The value (false when the
-- piece or field is gone, or when it is longer than that), the microseconds it took and the value's length: a
-- reader never receives more than it allows.
redis.register_function{function_name='windjoin_chunk', flags={'no-writes'}, callback=function(KEYS, ARGV)
  local t0 = redis.call('TIME')
  local size = redis.call('HSTRLEN', KEYS[1], ARGV[1])
  if size > tonumber(ARGV[2]) then return {false, micros_since(t0), size} end
  return {redis.call('HGET', KEYS[1], ARGV[1]), micros_since(t0), size}
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
