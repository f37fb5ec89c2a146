"""Closing snapshots on the driver after each batch's sinks committed: the periodic and punctuation policies.

Per task and batch: a snapshot closes when the batch held a punctuation record (every task, reason
"punctuation"), or when the wall clock since the task's latest snapshot (or, before the first, since the committer
started) reaches `every_ms` (reason "periodic"). The snapshot store decides what is new from the manifests on
disk, so a replayed or restarted batch never closes a second snapshot over the same batches.

With a Redis sink (which then does not trim by itself), each snapshot is then handed to Redis with
`connectors.redis.retention.advance_snapshot`: Redis records the snapshot as the tier boundary, then the pieces of
batches inside
the snapshot whose results are all older than the task's max result time - the Redis sink's `retain_ms` leave it,
and the oldest of them while it holds more than `max_bytes` (after Redis refused a batch for memory: all of them).
The manifest exists before Redis names it. Parquet retention (`retain_ms`) then drops whole old snapshots.

Redis lost (restarted without persistence, flushed) or full (a batch refused for memory, left to Parquet): its
meta hash comes back without the snapshot marker (full: with `full_pending`, then a snapshot closes even before
the task's first, so that Redis gives up every batch Parquet holds and has room again). The
marker is recovered here, after the next batch, from the manifests: a snapshot (reason "recovery") closes over
every committed batch up to this one, and Redis records it. Recovering on the job's side rather than by the
queries: only the job writes the tiers, and a snapshot up to the batch just committed makes the boundary exact
again (Redis holds every batch after it; Parquet every batch up to it), where the latest manifest alone would leave
the batches between it and the loss in neither tier's answer. Until then, queries let Parquet answer for every
committed batch (`result_query`), so no answer misses anything in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from windjoin.connectors.files.snapshots import Snapshot, SnapshotStore

PERIODIC, PUNCTUATION, RECOVERY = "periodic", "punctuation", "recovery"


def snapshot_reason(since_ms: int, now_ms: int, every_ms: int, punctuated: bool) -> str | None:
    """Why a task's snapshot closes now, or None: a punctuation in the batch, or `every_ms` of wall clock passed."""
    if punctuated:
        return PUNCTUATION
    if now_ms - since_ms >= every_ms:
        return PERIODIC
    return None


class SnapshotCommitter:
    """Runs the snapshot policies for every task after a batch; see the module docstring."""

    def __init__(
        self,
        store: SnapshotStore,
        tasks: Sequence[str],
        every_ms: int,
        retain_ms: int | None = None,
        redis: Any | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`redis`: a RedisSink (its client, namespace, retain_ms and max_time are used); `clock`: seconds."""
        if isinstance(every_ms, bool) or not isinstance(every_ms, int) or every_ms <= 0:
            raise ValueError(f"every_ms {every_ms!r} is not a positive int (milliseconds)")
        self.store = store
        self.tasks = list(tasks)
        self.every_ms = every_ms
        self.retain_ms = retain_ms
        self.redis = redis
        self.clock = clock
        self.started_ms = self._now_ms()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def after_batch(self, batch_id: int, punctuations: int = 0) -> list[Snapshot]:
        """Apply the policies once `batch_id` is committed in every sink; returns the snapshots closed now."""
        now_ms = self._now_ms()
        closed = []
        for task in self.tasks:
            latest = self.store.latest(task)
            since = self.started_ms if latest is None else latest.committed_at_ms
            reason = snapshot_reason(since, now_ms, self.every_ms, punctuations > 0)
            recorded, full = self._marks(task) if self.redis is not None else (None, False)
            if reason is None and (full or (latest is not None and self.redis is not None and recorded is None)):
                reason = RECOVERY  # Redis lost its marker, or refused a batch for memory (see the module docstring)
            snapshot = self.store.commit(task, batch_id, reason, now_ms) if reason else None
            if snapshot is not None:
                closed.append(snapshot)
                latest = snapshot
            # Also after a crash between a manifest and Redis (advancing is idempotent and only moves forward).
            if self.redis is not None and latest is not None and recorded != latest.id:
                self._advance_redis(latest)
            if snapshot is not None and self.retain_ms is not None:
                self.store.expire(task, self.retain_ms)
        return closed

    def _marks(self, task: str) -> tuple[int | None, bool]:
        """The snapshot id Redis records as the task's tier boundary (None: none, e.g. Redis restarted empty), and
        whether Redis refused a batch for memory since (then a snapshot must move everything Parquet holds out)."""
        from windjoin.connectors.redis.keys import meta_key

        value, full = self.redis.client.hmget(meta_key(task, self.redis.namespace), "snapshot", "full_pending")
        return (None if value is None else int(value)), full is not None

    def _advance_redis(self, snapshot: Snapshot) -> None:
        from windjoin.connectors.redis.retention import advance_snapshot

        max_time = self.redis.max_time(snapshot.task)
        cutoff = None if max_time is None else max_time - self.redis.retain_ms  # None: no results, none to drop
        advance_snapshot(
            self.redis.client,
            snapshot.task,
            self.redis.namespace,
            snapshot.id,
            snapshot.last_batch,
            cutoff,
            self.redis.max_bytes,
        )
