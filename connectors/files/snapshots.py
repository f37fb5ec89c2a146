"""Snapshots: consecutive committed Parquet batches of a task grouped under one commit id, visible all at once.

Layout, beside the Parquet sink's batch folders (see `parquet_sink`):
`<path>/task=<task>/_snapshots/<id as 12 digits>.json`, one manifest per snapshot (pyarrow datasets skip names
starting with "_" or "."). A manifest holds the `Snapshot` fields: the inclusive batch range
`first_batch..last_batch`, the number of rows and the result-time range of its rows, when and why it was committed.

- Ids count up from 1 per task; snapshot k+1 starts right after snapshot k (`first_batch = last_batch + 1`), so
  ranges never overlap and every committed batch up to the latest snapshot's `last_batch` is in exactly one.
- Commit: the manifest is written whole under its final name, never replacing an existing manifest (locally: a
  hidden temporary file, fsynced, then linked to its name and the folder fsynced; on an object store, one request
  after checking the name is free, the driver being its one writer): a snapshot is visible all at once or not at
  all. State is read from the manifests on disk on every call, so a commit repeated after a
  replay or a restart finds its batches already covered and does nothing.
- Reading: each manifest is checked in type and range (`snapshot_manifest`) and no two ranges may overlap; one
  that fails is `DamagedManifest` naming the task and id (anyone who can write the folder can write a manifest).
- Retention removes whole snapshots, oldest first (a prefix, so the rest stay consecutive): the manifest first,
  then its batch folders. A batch not yet in a snapshot is never removed; folders left by a crash between the two
  steps lie below the oldest manifest's range, where readers do not look, and the next `expire` removes them.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass

import orjson
import pyarrow.compute as pc

from windjoin.connectors.files.result_layout import ResultLayout
from windjoin.connectors.files.snapshot_manifest import MAX_MANIFEST_BYTES, REASONS, DamagedManifest, read_manifest
from windjoin.operators.result_table import stream_timestamps

SNAPSHOTS_DIR = "_snapshots"
_MANIFEST = re.compile(r"([0-9]{12})\.json")  # fullmatch: no trailing newline
_TMP = re.compile(r"\.(tmp-[0-9a-f]+\.json|[0-9]{12}\.json\.tmp-[0-9a-f]+)")  # a crash's (older versions: the first)
MAX_SNAPSHOT_ID = 10**12 - 1


@dataclass(frozen=True)
class Snapshot:
    """One committed snapshot of a task: batches `first_batch..last_batch` (inclusive) under commit id `id`."""

    task: str
    id: int
    first_batch: int
    last_batch: int
    rows: int
    min_time: int | None  # result-time range of its rows; None when it has no rows
    max_time: int | None
    committed_at_ms: int
    reason: str  # "periodic" | "punctuation" | "recovery"


class SnapshotStore:
    """The snapshots of every task under a Parquet sink's `parquet_path`."""

    def __init__(self, parquet_path: str | os.PathLike[str]) -> None:
        self.parquet = ResultLayout(parquet_path)
        self.files = self.parquet.files

    def snapshots_dir(self, task: str) -> str:
        return f"{self.parquet.task_dir(task)}/{SNAPSHOTS_DIR}"

    def manifest_path(self, task: str, snapshot_id: int) -> str:
        return f"{self.snapshots_dir(task)}/{_check_id(snapshot_id):012d}.json"

    def _ids(self, task: str) -> list[int]:
        found = (_MANIFEST.fullmatch(name) for name in self.files.names(self.snapshots_dir(task)))
        return sorted(int(m.group(1)) for m in found if m)

    def _load(self, task: str, snapshot_id: int) -> Snapshot:
        """The manifest, checked in type and range (`snapshot_manifest`); DamagedManifest when it is not one."""
        data = self.files.read_bytes(self.manifest_path(task, snapshot_id), MAX_MANIFEST_BYTES + 1)
        return Snapshot(**read_manifest(data, task, snapshot_id))

    def list(self, task: str) -> list[Snapshot]:
        """The task's retained snapshots, ascending id ([] when none); DamagedManifest when one is damaged or
        two overlap (their batches would be read twice)."""
        snapshots = [self._load(task, i) for i in self._ids(task)]
        for before, after in zip(snapshots, snapshots[1:], strict=False):
            if after.first_batch <= before.last_batch:
                raise DamagedManifest(
                    f"task {task!r}: snapshot manifest {after.id} is damaged: its batches from {after.first_batch} "
                    f"overlap snapshot {before.id}'s (to {before.last_batch})"
                )
        return snapshots

    def latest(self, task: str) -> Snapshot | None:
        ids = self._ids(task)
        return self._load(task, ids[-1]) if ids else None

    def get(self, task: str, snapshot_id: int) -> Snapshot:
        """The snapshot `snapshot_id` of `task`; KeyError naming the id when it is absent (never or no longer)."""
        ids = self._ids(task)
        if snapshot_id not in ids:
            held = f"{ids[0]}..{ids[-1]}" if ids else "none"
            raise KeyError(f"task {task!r} has no snapshot {snapshot_id!r} (retained snapshots: {held})")
        return self._load(task, snapshot_id)

    def batches(self, task: str, upto_snapshot_id: int) -> list[int]:
        """Retained committed batch ids covered by the snapshots up to `upto_snapshot_id`, ascending."""
        ids = self._ids(task)
        last = self.get(task, upto_snapshot_id).last_batch
        first = self._load(task, ids[0]).first_batch
        return [b for b in self.parquet.committed_batches(task) if first <= b <= last]

    def commit(self, task: str, last_batch: int, reason: str, now_ms: int) -> Snapshot | None:
        """Close a snapshot of the committed batches after the latest snapshot, up to `last_batch`.

        Returns the new snapshot, or None when no committed batch is newer than the latest snapshot (a replay, a
        restart, or nothing committed yet), or when another writer committed the same id meanwhile.
        """
        if reason not in REASONS:
            raise ValueError(f"snapshot reason {reason!r} is not accepted (one of {list(REASONS)})")
        previous = self.latest(task)
        start = 0 if previous is None else previous.last_batch + 1
        batches = [b for b in self.parquet.committed_batches(task) if start <= b <= last_batch]
        if not batches:
            return None
        rows, low, high = self._measure(task, batches)
        snapshot = Snapshot(
            task=task,
            id=1 if previous is None else previous.id + 1,
            first_batch=batches[0] if previous is None else start,
            last_batch=batches[-1],
            rows=rows,
            min_time=low,
            max_time=high,
            committed_at_ms=int(now_ms),
            reason=reason,
        )
        return snapshot if self._publish(snapshot) else None

    def _measure(self, task: str, batches: list[int]) -> tuple[int, int | None, int | None]:
        """Rows and result-time range of the batches' files (only the streams' timestamp columns are read)."""
        rows, low, high = 0, None, None
        for file in (f for batch in batches for f in self.parquet.batch_files(task, batch)):
            timestamps = stream_timestamps(self.files.read_schema(file))
            table = self.files.read_table(file, columns=[f"{stream}.{ts}" for stream, ts in timestamps.items()])
            rows += table.num_rows
            if not table.num_rows:
                continue
            times = pc.max_element_wise(*table.columns)
            span = pc.min_max(times)
            lo, hi = span["min"].as_py(), span["max"].as_py()
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
        return rows, low, high

    def _publish(self, snapshot: Snapshot) -> bool:
        """Write the manifest atomically; False if a manifest with its id already exists."""
        folder = self.snapshots_dir(snapshot.task)
        self.files.make_dir(folder)
        for name in self.files.names(folder):  # leftovers of crashed commits
            if _TMP.fullmatch(name):
                self.files.remove(f"{folder}/{name}")
        data = orjson.dumps(asdict(snapshot), option=orjson.OPT_INDENT_2)
        return self.files.write_new(self.manifest_path(snapshot.task, snapshot.id), data)

    def expire(self, task: str, retain_ms: int) -> list[int]:
        """Remove the oldest snapshots whose max result time is below the latest max result time - retain_ms.

        Whole snapshots, oldest first, stopping at the first one kept (empty snapshots in that prefix go too);
        the snapshot holding the latest result time always stays. Returns the removed snapshot ids.
        """
        if isinstance(retain_ms, bool) or not isinstance(retain_ms, int) or retain_ms <= 0:
            raise ValueError(f"retain_ms {retain_ms!r} is not a positive int (milliseconds)")
        snapshots = self.list(task)
        times = [s.max_time for s in snapshots if s.max_time is not None]
        if not times:
            return []
        bound = max(times) - retain_ms
        removed = []
        for snapshot in snapshots:
            if snapshot.max_time is not None and snapshot.max_time >= bound:
                break
            self.files.remove(self.manifest_path(task, snapshot.id))  # first the manifest: readers stop seeing it
            removed.append(snapshot)
        if removed:
            self.files.sync(self.snapshots_dir(task))
        kept = self._ids(task)
        if kept:
            first_kept = self._load(task, kept[0]).first_batch
            for batch in self.parquet.committed_batches(task):  # removed snapshots' folders, and crash leftovers
                if batch < first_kept:
                    self.files.unpublish(self.parquet.batch_dir(task, batch))
            self.files.sync(self.parquet.task_dir(task))
        return [s.id for s in removed]


def _check_id(snapshot_id: int) -> int:
    if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int) or not 0 < snapshot_id <= MAX_SNAPSHOT_ID:
        raise ValueError(f"snapshot id {snapshot_id!r} is not an int in 1..{MAX_SNAPSHOT_ID}")
    return snapshot_id
