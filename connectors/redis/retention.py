"""Which committed pieces leave the Redis tier: by result time (`retain_ms`), by bytes (`max_bytes`), or all of a
snapshot's after Redis refused a batch for memory; with Parquet snapshots, only pieces a committed snapshot covers
(`advance_snapshot`, which first records the snapshot as the Redis/Parquet boundary readers rely on). One library
function (`windjoin_drop`, `connectors.redis.functions`) drops whole pieces (their chunks, index entries and
accounting) in bounded calls; the caller repeats it while it reports more.

A piece leaves whole, so the feed never serves part of one: `dropped_upto` in the meta hash records the newest
batch a drop touched, and the feed serves only batches after it (`connectors.redis.feed.feed_coverage`).
"""

from __future__ import annotations

import redis

from windjoin.connectors.redis.functions import fcall
from windjoin.connectors.redis.keys import index_key, meta_key, pieces_key, task_prefix
from windjoin.operators.result_table import check_batch_id

PIECES_PER_CALL = 500  # pieces one call drops at most: each is a few Redis operations


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
        dropped, more = fcall(client, "windjoin_drop", keys, args)
        total += int(dropped)
        if not int(more):
            return total


def advance_snapshot(
    client: redis.Redis,
    task: str,
    namespace: str,
    snapshot_id: int,
    last_batch: int,
    cutoff_ms: int | None,
    max_bytes: int | None = None,
) -> int:
    """Record snapshot `snapshot_id` (covering batches <= `last_batch`) as the task's Redis/Parquet boundary, then
    drop the pieces of batches <= `last_batch` wholly older than `cutoff_ms` and the oldest of them while the tier
    holds more than `max_bytes` (all of them when Redis refused a batch for memory since the last snapshot).

    Only moves forward: a snapshot id at or below the recorded one (or a last batch below the recorded one)
    changes nothing and returns -1. `cutoff_ms=None` drops nothing by time. Returns the number of pieces dropped.
    """
    snapshot_id = check_batch_id(snapshot_id)
    last_batch = check_batch_id(last_batch)
    if cutoff_ms is not None and (isinstance(cutoff_ms, bool) or not isinstance(cutoff_ms, int)):
        raise ValueError(f"cutoff_ms {cutoff_ms!r} is not an int (epoch ms) or None")
    moved = int(fcall(client, "windjoin_advance", [meta_key(task, namespace)], [snapshot_id, last_batch]))
    if moved < 0:
        return -1
    return drop_pieces(
        client, task, namespace, upto=last_batch, cutoff_ms=cutoff_ms, max_bytes=max_bytes, everything=moved == 2
    )
