"""The Redis-loss tests' job and subscriber: batches written to both result tiers with the snapshot committer,
and a continuous query followed across 410s."""

from __future__ import annotations

from typing import Any

from tests.connectors.tiers import Tiers
from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.query.errors import Gone
from windjoin.pipelines.job.snapshot_committer import SnapshotCommitter


class Job:
    """Writes batches as the join job does: both sinks, then the snapshot committer (a snapshot on punctuation)."""

    def __init__(self, tiers: Tiers) -> None:
        self.tiers = tiers
        self.committer = SnapshotCommitter(tiers.snapshots, ["a"], every_ms=10**9, redis=tiers.redis)

    def batch(self, pairs: list[dict[str, Any]], punctuated: bool = False) -> int:
        batch_id = self.tiers.write({"a": pairs})
        self.committer.after_batch(batch_id, punctuations=int(punctuated))
        return batch_id


def follow_all(store: ResultStore, cursor: str, count: int = 3) -> tuple[list[tuple[int, int]], int]:
    """Every (batch_id, row) a subscriber gets after `cursor` until it is at the head, following the cursor of a
    410 like `windjoin query follow` does; and how many 410s it got."""
    seen, gone = [], 0
    while True:
        try:
            rows, cursor = store.follow("a", after=cursor, count=count)
        except Gone as err:
            assert err.cursor is not None, err
            gone += 1
            assert gone < 5, "410 again and again"
            cursor = err.cursor
            continue
        if not rows:
            return seen, gone
        seen += [(r["batch_id"], r["row"]) for r in rows]
