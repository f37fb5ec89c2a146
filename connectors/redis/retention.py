"""Which committed pieces leave the Redis tier: by result time (`retain_ms`), by bytes (`max_bytes`), or all of a
snapshot's after Redis refused a batch for memory. One library function (`windjoin_drop`, `connectors.redis.functions`)
drops whole pieces (their chunks, index entries and accounting) in bounded calls; the caller repeats it while it reports
more.

A piece leaves whole, so the feed never serves part of one: `dropped_upto` in the meta hash records the newest
batch a drop touched, and the feed serves only batches after it (`connectors.redis.feed.feed_coverage`).
"""

from __future__ import annotations

import redis

from windjoin.connectors.redis.functions import fcall
from windjoin.connectors.redis.keys import index_key, meta_key, pieces_key, task_prefix

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
