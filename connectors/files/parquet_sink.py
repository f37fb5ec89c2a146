"""Writing result tables to Parquet in two phases, staged by the executors and committed by the driver, at most
once per (task, batch id).

Layout (a contract other tools rely on): `<path>/task=<task>/batch=<batch_id>/part-<piece>.parquet`, hive-style,
so `pyarrow.dataset.dataset(path, format="parquet", partitioning="hive")` reads `task` and `batch` as columns. A
piece is the part of a batch one slot produced (its slot index); a committed batch folder holds one file per slot
that had results, or a single empty `part-0.parquet` (zero rows, full schema) when none had. Within a batch, the
result with `row` r is in `part-<r >> 32>.parquet` at position `r & (2^32 - 1)` (`result_table.PIECE_ROW_BITS`):
`batch_files` lists a batch's files in piece order, the order readers concatenate them in.

The path is a local folder or an object store's URL (`s3://bucket/prefix`; `result_files`: how each step stays
atomic there, and where credentials come from).

Stage (`stage`, in each slot's task on an executor): each piece is written whole (locally: temporary file, fsync,
rename) into the batch's hidden pending folder
`<path>/task=<task>/.batch=<batch_id>.pending/part-<piece>.parquet`. A piece already there (an earlier attempt of
the same batch, which a replay repeats exactly) is kept, and nothing is staged for a batch already committed.
Commit (`commit`, on the driver, once every slot staged): the pending folder is published as `batch=<batch_id>`
(locally one atomic rename, the parent folder fsynced after; on an object store, its pieces copied, then a commit
marker written), after removing files no slot reported. A batch folder is therefore published if and only if the
batch was committed, complete. Committing the task's last committed batch id again is a no-op: the replay after a
crash. A lower batch id is refused (`StaleBatchError`): batch ids of one checkpoint only grow, and the owner record
(below) keeps other checkpoints out. The last committed id is read once per sink and task, then kept in memory; an
exact replay is caught by the folder being published even when another process committed it meanwhile (Spark runs
one micro-batch at a time). `write` stages one piece and commits it (the join-file command, tests).
A crash leaves only hidden folders (pending, temporary; on an object store also a batch folder copied halfway,
without its marker): dataset readers skip names starting with "."; a replay of the batch completes its pending
folder, and a commit removes those of older batch ids.

Owner: `<path>/task=<task>/_owner.json` names the checkpoint whose batches the task folder holds
(`sink_owner.CheckpointId`: `run_id`, `checkpoint`), written whole when a job claims the task; dataset readers skip
names starting with "_".
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping

import pyarrow as pa

from windjoin.connectors.files.result_layout import BATCH_DIR, ResultLayout
from windjoin.operators.result_table import (
    BATCH_ID,
    EMITTED_AT,
    check_batch_id,
    check_identifier,
    check_piece,
    check_result_table,
    row_bytes,
)
from windjoin.operators.sink_owner import CheckpointId, OwnerRecordError, stale_batch

OWNER_FILE = "_owner.json"
GROUP_BYTES = 8 << 20
_HIDDEN_DIR = re.compile(r"\.batch=([0-9]+)\.(pending|tmp-[0-9a-f]+)")  # pending, or left by older versions


def group_rows(table: pa.Table) -> int:
    """Rows per row group: about `GROUP_BYTES` of row values each, so that readers (a query's scan, a replay
    for the continuous feed) hold a bounded part of a piece at a time, whatever its rows hold."""
    if not table.num_rows:
        return 1
    average = max(1, int(row_bytes(table).sum()) // table.num_rows)
    return max(1, min(table.num_rows, GROUP_BYTES // average))


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary encoding: strings, and the batch id and emission time (one value a piece).
    Numbers of results rarely repeat, and trying a dictionary on them took 3/4 of a piece's write (60 of 80 ms
    for 100k pairs of six int64 fields)."""
    columns = [BATCH_ID, EMITTED_AT]
    for field in schema:
        if pa.types.is_struct(field.type):
            columns += [f"{field.name}.{child.name}" for child in field.type if pa.types.is_string(child.type)]
    return columns


def part_name(piece: int) -> str:
    """The file name of a batch's piece (see the module docstring)."""
    return f"part-{check_piece(piece)}.parquet"


class ParquetSink(ResultLayout):
    """Result tables under `path` (a folder or a URL), one hive partition per task and batch id; idempotent per
    (task, batch id)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self._last: dict[str, int | None] = {}  # last committed batch id per task, read on first use

    @property
    def name(self) -> str:
        """The sink, for messages and metric labels."""
        return f"Parquet {self.files.url}"

    def write(self, batch_id: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage each task's result table for `batch_id` as piece 0 and commit it; returns rows written per task
        committed by this call (a task whose last committed batch id is `batch_id` is skipped: a replay)."""
        batch_id = check_batch_id(batch_id)
        for task, table in tables.items():
            check_identifier("task name", task)
            check_result_table(table, batch_id, task)
        self.stage(batch_id, 0, {t: table for t, table in tables.items() if table.num_rows})
        pieces = {t: [0] if table.num_rows else [] for t, table in tables.items()}
        committed = self.commit(batch_id, pieces, schemas={t: x.schema for t, x in tables.items()})
        return {task: tables[task].num_rows for task in committed}

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        """Stage one slot's piece of `batch_id` per task (see the module docstring); returns rows staged per task
        by this call. Tasks of a committed batch, and pieces an earlier attempt staged, are left as they are."""
        batch_id, name = check_batch_id(batch_id), part_name(piece)
        staged = {}
        for task, table in tables.items():
            check_result_table(table, batch_id, task)
            if self.files.published(self.batch_dir(task, batch_id)):  # a replay (an older id fails the commit)
                continue
            pending = self.pending_dir(task, batch_id)
            self.files.make_dir(pending)
            final = f"{pending}/{name}"
            if self.files.is_file(final):
                continue
            self.files.write_parquet(
                final, table, row_group_size=group_rows(table), use_dictionary=dictionary_columns(table.schema)
            )
            staged[task] = table.num_rows
        return staged

    def commit(
        self,
        batch_id: int,
        pieces: Mapping[str, Collection[int]],
        *,
        schemas: Mapping[str, pa.Schema],
        batch_max: Mapping[str, int] | None = None,
    ) -> list[str]:
        """Close `batch_id` for each task from its staged `pieces` (the slots that reported results; a task
        without any gets one empty file of its `schemas` entry); returns the tasks committed by this call.
        (`batch_max`, the batch's largest result times, is for sinks that trim by them.)

        A task is skipped when `batch_id` is its last committed batch id (a replay); StaleBatchError when below.
        RuntimeError when a reported piece is missing (staged elsewhere, or removed): the batch is not closed.
        """
        batch_id = check_batch_id(batch_id)
        committed = []
        for task, slots in pieces.items():
            if self._commit(task, batch_id, {part_name(p) for p in slots}, schemas[task]):
                committed.append(task)
        return committed

    def _commit(self, task: str, batch_id: int, names: set[str], schema: pa.Schema) -> bool:
        if task not in self._last:
            self._last[task] = self.last_committed(task)
        last = self._last[task]
        if last is not None and batch_id < last:
            raise stale_batch(self.name, task, batch_id, last)
        if last == batch_id:
            return False
        final = self.batch_dir(task, batch_id)
        if self.files.published(final):  # committed by another writer since this sink looked
            self._last[task] = batch_id
            return False
        pending = self.pending_dir(task, batch_id)
        self.files.make_dir(pending)
        self._remove_leftovers(task, batch_id)
        for entry in self.files.names(pending):  # temporary files, pieces of an attempt that is not this one
            if entry not in names:
                self.files.remove(f"{pending}/{entry}")
        missing = sorted(n for n in names if not self.files.is_file(f"{pending}/{n}"))
        if missing:
            raise RuntimeError(
                f"{self.location(task)}: batch {batch_id} cannot be committed, staged pieces missing: {missing}"
            )
        if not names:
            names = {part_name(0)}
            self.files.write_parquet(f"{pending}/{part_name(0)}", schema.empty_table())
        published = self.files.publish(pending, final, sorted(names))
        self._last[task] = batch_id
        return published

    def _remove_leftovers(self, task: str, batch_id: int) -> None:
        """Remove hidden folders of batch ids below `batch_id` (committed since, or never to be), temporary
        ones of older versions up to it, and batch folders below it that were never published (an object store's
        copy a killed commit left halfway, replayed since); never the batch's pending folder or newer ones."""
        task_dir = self.task_dir(task)
        published = set(self.files.published_names(task_dir))  # one listing, not a request per batch folder
        for entry in self.files.names(task_dir):
            hidden, batch = _HIDDEN_DIR.fullmatch(entry), BATCH_DIR.fullmatch(entry)
            stale_hidden = hidden and (
                int(hidden.group(1)) < batch_id or hidden.group(2) != "pending" and int(hidden.group(1)) == batch_id
            )
            unpublished = batch and int(batch.group(1)) < batch_id and entry not in published
            if stale_hidden or unpublished:
                self.files.remove_tree(f"{task_dir}/{entry}")

    def owner(self, task: str) -> CheckpointId | None:
        """The checkpoint that claimed `task`'s folder, or None when none did."""
        path = f"{self.task_dir(task)}/{OWNER_FILE}"
        try:
            record = json.loads(self.files.read_bytes(path))
            return CheckpointId(record["run_id"], record["checkpoint"])
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError) as err:
            raise OwnerRecordError(
                f"{path}: not an owner record ({err}); remove it to let the next job claim the task"
            ) from None

    def holds_results(self, task: str) -> bool:
        """Whether `task`'s folder holds anything committed (batches, snapshots), whoever wrote it."""
        return any(not name.startswith(".") and name != OWNER_FILE for name in self.files.names(self.task_dir(task)))

    def clear(self, task: str) -> None:
        """Remove `task`'s folder: its batches, snapshots and owner record (a job then starts it afresh)."""
        self._last.pop(task, None)
        self.files.remove_tree(self.task_dir(task))
        self.files.sync(self.files.root)

    def claim(self, task: str, checkpoint: CheckpointId) -> None:
        """Record `checkpoint` as the writer of `task`'s folder (atomically: the old record or the new one)."""
        task_dir = self.task_dir(task)
        self.files.make_dir(task_dir)
        record = json.dumps({"run_id": checkpoint.run_id, "checkpoint": checkpoint.path}).encode()
        self.files.write_bytes(f"{task_dir}/{OWNER_FILE}", record)
