"""Which committed pieces leave the Redis tier: by result time (`retain_ms`), by bytes (`max_bytes`), or all of a
snapshot's after Redis refused a batch for memory. One Lua script drops whole pieces (their chunks, index entries
and accounting) in bounded calls; the caller repeats it while it reports more.

A piece leaves whole, so the feed never serves part of one: `dropped_upto` in the meta hash records the newest
batch a drop touched, and the feed serves only batches after it (`redis_feed.feed_coverage`).
"""

from __future__ import annotations

import redis

from windjoin.connectors.redis_keys import index_key, meta_key, pieces_key, task_prefix

PIECES_PER_CALL = 500  # pieces one call drops at most: each is a few Redis operations

# KEYS: meta, index, pieces. ARGV: key prefix, last batch that may leave ("" for any), time cutoff ("" for none:
# pieces whose every result is older leave), max bytes ("" for none: the oldest pieces by result time leave, but
# never the newest committed batch's), "1" to drop every piece up to the last batch, pieces per call.
# Returns {pieces dropped, 1 when it stopped at the per-call bound}.
_DROP = """#!lua flags=allow-oom
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
"""


def drop_pieces(
    client: redis.Redis,
    task: str,
    namespace: str,
    *,
    upto: int | None = None,
    cutoff_ms: int | None = None,
    max_bytes: int | None = None,
    everything: bool = False,
) -> int:
    """Drop the task's committed pieces of batches up to `upto` (None: any) that are wholly older than `cutoff_ms`,
    then the oldest while the tier holds more than `max_bytes` (never the newest committed batch), or, with
    `everything`, all of them; returns how many pieces left."""
    keys = [meta_key(task, namespace), index_key(task, namespace), pieces_key(task, namespace)]
    args = [
        task_prefix(task, namespace),
        "" if upto is None else int(upto),
        "" if cutoff_ms is None else int(cutoff_ms),
        "" if max_bytes is None else int(max_bytes),
        "1" if everything else "0",
        PIECES_PER_CALL,
    ]
    total = 0
    while True:
        dropped, more = client.eval(_DROP, len(keys), *keys, *args)
        total += int(dropped)
        if not int(more):
            return total
