"""Where a task's Parquet results are and which batches are committed: the layout the writer (`parquet_sink`,
whose docstring is the contract) and every reader share, so a reader never builds a writer to learn it.

`<path>/task=<task>/batch=<batch_id>/part-<piece>.parquet`: a batch folder is published if and only if its batch
was committed, complete; names starting with "." (pending, temporary) or "_" (the owner record) are not results.
"""

from __future__ import annotations

import os
import re

import pyarrow as pa

from windjoin.connectors.files.result_files import ResultFiles, result_files
from windjoin.operators.result_table import BATCH_ID, check_batch_id, check_identifier

BATCH_DIR = re.compile(r"batch=([0-9]+)")  # fullmatch: "batch=1\n" is no batch
PART_FILE = re.compile(r"part-([0-9]+)\.parquet")


class ResultLayout:
    """A Parquet result tree under `path` (a folder or a URL), read side: folders, committed batches, files."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.files: ResultFiles = result_files(path)

    def location(self, task: str) -> str:
        """Where `task`'s results are, for messages."""
        return f"Parquet {self.task_dir(task)}"

    def task_dir(self, task: str) -> str:
        return self.files.join(f"task={check_identifier('task name', task)}")

    def batch_dir(self, task: str, batch_id: int) -> str:
        return f"{self.task_dir(task)}/batch={check_batch_id(batch_id)}"

    def pending_dir(self, task: str, batch_id: int) -> str:
        return f"{self.task_dir(task)}/.batch={check_batch_id(batch_id)}.pending"

    def batch_pieces(self, task: str, batch_id: int) -> list[tuple[int, str]]:
        """(piece, file) of a committed batch of `task`, in piece order (the batch's row order)."""
        folder = self.batch_dir(task, batch_id)
        found = ((PART_FILE.fullmatch(name), name) for name in self.files.names(folder))
        return sorted((int(m.group(1)), f"{folder}/{name}") for m, name in found if m)

    def batch_files(self, task: str, batch_id: int) -> list[str]:
        """The files of a committed batch of `task`, in row order (readers concatenate them)."""
        return [file for _, file in self.batch_pieces(task, batch_id)]

    def committed_batches(self, task: str) -> list[int]:
        """The committed batch ids of `task`, ascending."""
        found = (BATCH_DIR.fullmatch(name) for name in self.files.published_names(self.task_dir(task)))
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
        tables = [self.files.read_table(f) for b in batches for f in self.batch_files(task, b)]
        table = pa.concat_tables(tables)
        if BATCH_ID not in table.column_names:
            raise ValueError(f"{self.task_dir(task)}: files without a {BATCH_ID} column")
        return table
