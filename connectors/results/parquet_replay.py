"""A task's committed Parquet batches read in commit order: the continuous-query feed's stand-in for batches that
Redis does not hold (it restarted empty, was flushed, or trimmed its feed).

Every batch the job commits has a folder, empty ones included (see `parquet_sink`), one file per piece, and rows
are numbered per piece as the Redis sink numbers them (`result_table.piece_rows`), so `(batch_id, row)` positions
mean the same in both tiers. Batches below the oldest
retained snapshot are not read: retention removes them (folders left there by a crash are on their way out).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from windjoin.connectors.files.result_layout import ResultLayout
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.results.parquet_scan import Footers, readable
from windjoin.operators.query.cursors import FEED_END as _END
from windjoin.operators.query.fields import concat_rows, row_position, table_rows
from windjoin.operators.query.order import ReadBudget
from windjoin.operators.result_table import EMITTED_AT, PIECE_ROW_BITS, row_bytes


class ParquetReplay:
    """Reads the committed batches of the tasks under a Parquet sink's path, in commit order."""

    def __init__(self, parquet: ResultLayout, snapshots: SnapshotStore) -> None:
        self.parquet = parquet
        self.snapshots = snapshots
        self.footers = Footers(parquet)  # each batch's files and footers, read once (one-time queries share it)

    def retained(self, task: str) -> list[int]:
        """The committed batch ids readers may use, ascending: from the oldest retained snapshot's first batch
        (every committed batch when there is no snapshot yet)."""
        batches = self.parquet.committed_batches(task)
        oldest = self.snapshots.list(task)[:1]
        return [b for b in batches if b >= oldest[0].first_batch] if oldest else batches

    def rows_after(
        self, task: str, after: tuple[int, int], upto: int, count: int, max_bytes: int | None = None
    ) -> tuple[pa.Table, tuple[int, int]] | None:
        """Up to `count` rows (a rows table, `fields.rows_table`) after the (batch_id, row) position, of batches up
        to `upto` inclusive, and about `max_bytes` of row values at most (the first row always; None: no bound),
        read a row group at a time; and the position after them ((upto, end) once every batch up to `upto` was
        read; `end` is any row past the last).

        None when a batch that must be read is not retained (expired) or not committed yet: the rows cannot be
        served from Parquet now."""
        batch, row = after
        retained = set(self.retained(task))
        parts: list[pa.Table] = []
        read = 0
        budget = ReadBudget(2**62 if max_bytes is None else max_bytes)
        while read < count:
            if batch > upto or (batch == upto and row >= _END):
                return concat_rows(parts), (upto, _END)
            current, last_row = (batch, row) if row < _END else (batch + 1, -1)
            if current > upto:
                return concat_rows(parts), (upto, _END)
            if current not in retained:
                return None
            for piece, file, metadata, _ in self.footers.pieces(task, current):
                first = piece << PIECE_ROW_BITS  # the piece's rows are numbered from here (result_table.piece_rows)
                with self.parquet.files.open_input(file) as source:
                    taken, whole = _piece_rows(
                        task, current, source, metadata, first, max(0, last_row + 1 - first), count - read, budget
                    )
                parts += taken
                read += sum(part.num_rows for part in taken)
                if not whole:  # stopped inside the piece, at the count or the bytes
                    rows = concat_rows(parts)
                    return rows, (current, row_position(rows, -1)[1] if rows.num_rows else last_row)
            batch, row = current, _END
        return concat_rows(parts), (batch, row)

    def first_emitted_at_or_after(self, task: str, from_ms: int, below: int) -> int | None:
        """The first retained batch below `below` whose rows were emitted at or after `from_ms`, or None.

        Batches are emitted in commit order, so this walks back from `below - 1` and stops at the first batch
        emitted earlier: it reads as many footers as there are batches to replay (empty batches are skipped)."""
        found = None
        for batch in reversed([b for b in self.retained(task) if b < below]):
            emitted = [_first_emitted_at(footer.metadata) for footer in self.footers.pieces(task, batch)]
            emitted = [e for e in emitted if e != _EMPTY]
            if not emitted:
                continue
            if None in emitted or min(emitted) < from_ms:
                break
            found = batch
        return found


def _piece_rows(
    task: str,
    batch: int,
    file: pa.NativeFile,
    metadata: pq.FileMetaData,
    first: int,
    skip: int,
    count: int,
    budget: ReadBudget,
) -> tuple[list[pa.Table], bool]:
    """Up to `count` rows of a piece file (footer `metadata`) from position `skip` on (its rows numbered from
    `first`; rows tables), a row group at a time within `budget`; and whether the file was read to its end."""
    handle = readable(task, batch, lambda: pq.ParquetFile(file, metadata=metadata))
    parts: list[pa.Table] = []
    read = 0
    start = 0  # the group's first position in the file
    for group in range(metadata.num_row_groups):
        size = metadata.row_group(group).num_rows
        if start + size > skip:
            if read >= count or budget.left <= 0:
                return parts, False
            table = readable(task, batch, lambda group=group: handle.read_row_group(group))
            low = max(skip - start, 0)
            taken = table.slice(low, count - read)
            taken = taken.slice(0, budget.take(row_bytes(taken)))
            parts.append(table_rows(taken, first + start + low + np.arange(taken.num_rows)))
            read += taken.num_rows
            if low + taken.num_rows < size:
                return parts, False
        start += size
    return parts, True


_EMPTY = -1  # a file without rows


def _first_emitted_at(meta: pq.FileMetaData) -> int | None:
    """The smallest `emitted_at` of a file's rows by its footer, `_EMPTY` without rows, None without statistics."""
    if not meta.num_rows:
        return _EMPTY
    group = meta.row_group(0)
    column = next(i for i in range(group.num_columns) if group.column(i).path_in_schema == EMITTED_AT)
    stats = group.column(column).statistics
    return stats.min if stats is not None and stats.has_min_max else None
