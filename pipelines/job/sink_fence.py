"""Before a job starts: the sinks' tasks must belong to the job's checkpoint, or be claimed by it.

A sink skips every batch id at or below the one it last committed, which is exactly-once only while one
checkpoint numbers the batches: a new checkpoint restarts at batch 0 and the sink would skip its batches as
replays. So each sink records, per task, the checkpoint that writes it (`operators.sink_owner`), and a start
- keeps what this checkpoint wrote (a restart: the fence by batch id stays exactly-once);
- claims tasks without results silently, whoever claimed them before (no commit mark, nothing to skip);
- refuses tasks written by another checkpoint, or before owners were recorded, naming each and both checkpoints;
  with `fresh` it clears their results and commit records instead (the new run's batches 0.. are then written)
  and claims them.
Every task is judged before anything is cleared, so a refusal leaves the sinks as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from windjoin.operators.sink_owner import CheckpointId


class SinkOwnerError(ValueError):
    """Sinks hold results of another checkpoint; the message names them and both checkpoints."""


@runtime_checkable
class OwnedSink(Protocol):
    """A sink that records which checkpoint writes each task (ParquetSink, RedisSink)."""

    def location(self, task: str) -> str: ...
    def owner(self, task: str) -> CheckpointId | None: ...
    def holds_results(self, task: str) -> bool: ...
    def clear(self, task: str) -> None: ...
    def claim(self, task: str, checkpoint: CheckpointId) -> None: ...


def fence_sinks(
    sinks: Sequence[Any], tasks: Sequence[str], checkpoint: CheckpointId, fresh: bool, adopt_unowned: bool = False
) -> list[str]:
    """Claim every owned sink's `tasks` for `checkpoint` (see the module docstring); returns a line per task that
    `fresh` cleared or that was adopted. SinkOwnerError, on one line, when another checkpoint's results are in the
    way and not `fresh`. With `adopt_unowned` (a checkpoint that committed batches before run ids were recorded,
    `checkpoint_identity.predates_run_ids`), results without an owner are its own: they are claimed as they are.
    """
    owned = [sink for sink in sinks if isinstance(sink, OwnedSink)]
    foreign: list[tuple[OwnedSink, str, CheckpointId | None]] = []
    empty: list[tuple[OwnedSink, str]] = []
    adopted = []
    for sink in owned:
        for task in tasks:
            owner = sink.owner(task)
            if owner is not None and owner.run_id == checkpoint.run_id:
                continue
            if not sink.holds_results(task):
                empty.append((sink, task))
            elif owner is None and adopt_unowned and not fresh:
                empty.append((sink, task))
                adopted.append(f"sinks: adopted {sink.location(task)}, written by this checkpoint before owners")
            else:
                foreign.append((sink, task, owner))
    if foreign and not fresh:
        raise SinkOwnerError(_refusal(foreign, checkpoint))
    cleared = []
    for sink, task, owner in foreign:
        sink.clear(task)  # first: a crash before the claim leaves an empty task, claimed silently next time
        sink.claim(task, checkpoint)
        cleared.append(f"fresh sinks: cleared {sink.location(task)} (written by {_writer(owner)})")
    for sink, task in empty:
        sink.claim(task, checkpoint)
    return cleared + adopted


def _writer(owner: CheckpointId | None) -> str:
    return (
        "an unrecorded checkpoint (before sinks recorded owners)" if owner is None else f"checkpoint {owner.describe()}"
    )


def _refusal(foreign: list[tuple[OwnedSink, str, CheckpointId | None]], checkpoint: CheckpointId) -> str:
    """One line: each writer with the places it wrote, this job's checkpoint, and the two ways out."""
    by_writer: dict[CheckpointId | None, list[str]] = {}
    for sink, task, owner in foreign:
        by_writer.setdefault(owner, []).append(sink.location(task))
    written = "; ".join(f"{', '.join(places)} written by {_writer(owner)}" for owner, places in by_writer.items())
    [only] = by_writer if len(by_writer) == 1 else [None]
    same = "" if only is None else f", or run on checkpoint {only.path} that wrote them"
    return (
        f"sinks hold results of another checkpoint: {written}; this job's checkpoint is {checkpoint.describe()}, "
        "whose batch ids restart at 0, so the sinks would skip its batches as replays. Start with --fresh-sinks "
        f"(start_job(fresh_sinks=True)) to clear them and write them afresh{same}"
    )
