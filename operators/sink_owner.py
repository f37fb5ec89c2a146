"""Which checkpoint a sink's results belong to: the owner record the sinks keep per task, and the fence's errors.

The sinks are exactly-once by batch id, and Spark numbers a checkpoint's micro-batches from 0: batch ids of two
checkpoints are unrelated, so a sink written by one checkpoint would take another's batches for replays and skip
them. Each sink therefore records, per task, the checkpoint whose batches it holds (its run id, made once when the
checkpoint is first used, and its path, for messages); `pipelines.job.sink_fence` compares it before a job starts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointId:
    """A checkpoint folder's identity: `run_id` decides (a moved folder keeps it), `path` is shown to people."""

    run_id: str
    path: str

    def __post_init__(self) -> None:
        try:
            uuid.UUID(self.run_id)
        except (TypeError, ValueError, AttributeError):
            raise ValueError(f"run id {self.run_id!r} is not a UUID") from None

    def describe(self) -> str:
        return f"{self.path} (run {self.run_id})"


class OwnerRecordError(ValueError):
    """An owner record (or a checkpoint's run record) cannot be read; the message names the file or key."""


class StaleBatchError(RuntimeError):
    """A batch id below a task's last committed one: not a replay of this run's last batch (ids only grow).

    The owner fence rules out another checkpoint's batches, so this is a second writer or a damaged sink; writing
    it would go unnoticed by readers that follow batch ids, and skipping it would lose its results.
    """


def stale_batch(sink: str, task: str, batch_id: int, committed: int) -> StaleBatchError:
    return StaleBatchError(
        f"{sink}: batch {batch_id} of task {task!r} is below the last committed batch {committed}; batch ids of "
        "one checkpoint only grow and a replay repeats the last batch, so another writer shares this sink"
    )
