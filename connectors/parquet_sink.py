"""Writing result tables to Parquet, committed atomically and at most once per (task, batch id).

Layout (a contract other tools rely on): `<path>/task=<task>/batch=<batch_id>/part-0.parquet`, hive-style, so
`pyarrow.dataset.dataset(path, format="parquet", partitioning="hive")` reads `task` and `batch` as columns.

Commit: the file is written (and fsynced) into a hidden temporary folder beside the batch folder,
`<path>/task=<task>/.batch=<batch_id>.tmp-<random>`, which is then renamed to `batch=<batch_id>` (one atomic
rename on a POSIX file system; the parent folder is fsynced after). A batch folder therefore exists if and only if
the batch was committed, complete. Writing the task's last committed batch id again (the largest batch folder) is
a no-op: the replay after a crash. A lower batch id is refused (`StaleBatchError`): batch ids of one checkpoint
only grow, and the owner record (below) keeps other checkpoints out. The last committed id is read from disk once
per sink and task, then kept in memory; an exact replay is caught by the folder's existence even when another
process committed it meanwhile (two concurrent writers of one query are not expected: Spark runs one micro-batch
at a time).
A crash before the rename leaves only a hidden temporary folder: dataset readers skip names starting with "." and
the next write of the task removes leftovers of that batch id and below. A task with no rows in a batch still
commits the batch, as a `part-0.parquet` with zero rows and the full schema: every committed batch folder holds
exactly one file, and readers and replays agree on which batches were committed.

Owner: `<path>/task=<task>/_owner.json` names the checkpoint whose batches the task folder holds
(`sink_owner.CheckpointId`: `run_id`, `checkpoint`), written atomically (temporary file, fsync, rename) when a job
claims the task; dataset readers skip names starting with "_".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from windjoin.connectors.result_table import BATCH_ID, check_batch_id, check_identifier, check_result_table
from windjoin.connectors.sink_owner import CheckpointId, OwnerRecordError, stale_batch

PART_FILE = "part-0.parquet"
OWNER_FILE = "_owner.json"
_BATCH_DIR = re.compile(r"^batch=(\d+)$")
_TMP_DIR = re.compile(r"^\.batch=(\d+)\.tmp-[0-9a-f]+$")


class ParquetSink:
    """Result tables under `path`, one hive partition per task and batch id; idempotent per (task, batch id)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._last: dict[str, int | None] = {}  # last committed batch id per task, read from disk on first use

    @property
    def name(self) -> str:
        """The sink, for messages and metric labels."""
        return f"Parquet {self.path}"

    def location(self, task: str) -> str:
        """Where `task`'s results are, for messages."""
        return f"Parquet {self.task_dir(task)}"

    def task_dir(self, task: str) -> Path:
        return self.path / f"task={check_identifier('task name', task)}"

    def batch_dir(self, task: str, batch_id: int) -> Path:
        return self.task_dir(task) / f"batch={check_batch_id(batch_id)}"

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Commit each task's result table for `batch_id`; returns rows written per task committed by this call.

        A task is skipped (absent from the returned mapping) when `batch_id` is its last committed batch id: a
        replay. StaleBatchError when it is below. Fenced like the Redis sink, so both agree on what a task committed.
        """
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        written = {}
        for task, table in tables.items():
            if self._commit(task, batch_id, table):
                written[task] = table.num_rows
        return written

    def _commit(self, task: str, batch_id: int, table: pa.Table) -> bool:
        if task not in self._last:
            self._last[task] = self.last_committed(task)
        last = self._last[task]
        if last is not None and batch_id < last:
            raise stale_batch(self.name, task, batch_id, last)
        if last == batch_id:
            return False
        final = self.batch_dir(task, batch_id)
        if final.exists():  # committed by another writer since this sink looked
            self._last[task] = batch_id
            return False
        parent = final.parent
        parent.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers(parent, batch_id)
        tmp = parent / f".batch={batch_id}.tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            file = tmp / PART_FILE
            pq.write_table(table, file)
            fsync_path(file)
            fsync_path(tmp)
            try:
                os.rename(tmp, final)  # atomic; fails if another writer committed the batch meanwhile
            except OSError:
                if final.exists():
                    self._last[task] = batch_id
                    return False
                raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        fsync_path(parent)
        self._last[task] = batch_id
        return True

    @staticmethod
    def _remove_leftovers(task_dir: Path, batch_id: int) -> None:
        """Remove temporary folders of crashed writes of this batch id or older (never of newer batches)."""
        for entry in task_dir.iterdir():
            match = _TMP_DIR.match(entry.name)
            if match and int(match.group(1)) <= batch_id:
                shutil.rmtree(entry, ignore_errors=True)

    def batch_files(self, task: str, batch_id: int) -> list[Path]:
        """The files of a committed batch of `task`, in row order (readers concatenate them)."""
        return [self.batch_dir(task, batch_id) / PART_FILE]

    def committed_batches(self, task: str) -> list[int]:
        """The committed batch ids of `task`, ascending."""
        task_dir = self.task_dir(task)
        if not task_dir.is_dir():
            return []
        found = (_BATCH_DIR.match(entry.name) for entry in task_dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def last_committed(self, task: str) -> int | None:
        """The largest committed batch id of `task`, or None before its first batch."""
        batches = self.committed_batches(task)
        return batches[-1] if batches else None

    def read(self, task: str) -> pa.Table:
        """All committed results of `task`, in batch order then row order, with the result table's schema.

        Raises FileNotFoundError when the task has no committed batch.
        """
        batches = self.committed_batches(task)
        if not batches:
            raise FileNotFoundError(f"{self.task_dir(task)}: no committed batch of task {task!r}")
        tables = [pq.read_table(f) for b in batches for f in self.batch_files(task, b)]
        table = pa.concat_tables(tables)
        if BATCH_ID not in table.column_names:
            raise ValueError(f"{self.task_dir(task)}: files without a {BATCH_ID} column")
        return table

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task`'s folder, or None when none did."""
        path = self.task_dir(task) / OWNER_FILE
        try:
            record = json.loads(path.read_bytes())
            return CheckpointId(record["run_id"], record["checkpoint"])
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as err:
            raise OwnerRecordError(
                f"{path}: not an owner record ({err}); remove it to let the next job claim the task"
            ) from None

    def holds_results(self, task: str) -> bool:
        """Whether `task`'s folder holds anything committed (batches, snapshots), whoever wrote it."""
        task_dir = self.task_dir(task)
        if not task_dir.is_dir():
            return False
        return any(not e.name.startswith(".") and e.name != OWNER_FILE for e in task_dir.iterdir())

    def clear(self, task: str) -> None:
        """Remove `task`'s folder: its batches, snapshots and owner record (a job then starts it afresh)."""
        self._last.pop(task, None)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.task_dir(task))
            fsync_path(self.path)

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint` as the writer of `task`'s folder (atomically: the old record or the new one)."""
        task_dir = self.task_dir(task)
        task_dir.mkdir(parents=True, exist_ok=True)
        tmp = task_dir / f".owner.tmp-{uuid.uuid4().hex}"
        try:
            tmp.write_text(json.dumps({"run_id": checkpoint.run_id, "checkpoint": checkpoint.path}))
            fsync_path(tmp)
            os.replace(tmp, task_dir / OWNER_FILE)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(task_dir)


def fsync_path(path: Path) -> None:
    """Flush a file's or a folder's data to disk (a folder's: its entries, so a rename or unlink survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on folders
            os.fsync(fd)
    finally:
        os.close(fd)
