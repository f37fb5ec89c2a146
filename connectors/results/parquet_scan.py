"""The Parquet tier of a one-time query as units for `span_scan`: a group per snapshot (or per set of batches no
snapshot holds yet) that lists its files' row groups when the scan reaches it, and a leaf per row group.

A row group's statistics bound its rows' result times (the latest timestamp is at least each stream's smallest),
so groups outside the span are never read and the others are read in time order; a leaf reads only the leaves
asked for, and sizes its rows by its row group's uncompressed bytes per row. The files and footers of a batch are
read once per version of its folder (`Footers`). A file that cannot be read (damaged,
truncated) is `Damaged` naming the task and batch, never a path; a file that vanished (its snapshot expired
meanwhile) is FileNotFoundError, so the query reads again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from windjoin.connectors.files.result_files import ResultFiles
from windjoin.connectors.files.result_layout import ResultLayout
from windjoin.connectors.results.span_scan import Part
from windjoin.operators.query.errors import Damaged
from windjoin.operators.result_table import PIECE_ROW_BITS, stream_timestamps

T = TypeVar("T")
EARLIEST = -(2**63)  # the lower bound of units whose result times are unknown


@dataclass
class RowGroup:
    """One row group of one piece's file."""

    lower: int
    task: str
    batch: int
    files: ResultFiles
    path: str
    metadata: pq.FileMetaData
    group: int
    first_row: int  # the row number of its first row

    def read(self, columns: Sequence[str], sized: Sequence[str] | None) -> Part:
        with self.files.open_input(self.path) as source:
            file = readable(self.task, self.batch, lambda: pq.ParquetFile(source, metadata=self.metadata))
            table = readable(self.task, self.batch, lambda: file.read_row_group(self.group, columns=list(columns)))
        table = table.flatten()
        rows = np.arange(self.first_row, self.first_row + table.num_rows, dtype=np.int64)
        sizes = None if sized is None else np.full(table.num_rows, self._row_bytes(sized), dtype=np.int64)
        return Part(table.select(list(columns)), rows, sizes)

    def _row_bytes(self, leaves: Sequence[str]) -> int:
        """Uncompressed bytes per row of the leaves, from the row group's metadata."""
        group = self.metadata.row_group(self.group)
        wanted = set(leaves)
        total = sum(
            group.column(i).total_uncompressed_size
            for i in range(group.num_columns)
            if group.column(i).path_in_schema in wanted
        )
        return max(1, total // max(1, group.num_rows))


@dataclass
class Batches:
    """Committed batches of a task not listed yet (a snapshot's: `lower` its smallest result time; or batches no
    snapshot holds: EARLIEST)."""

    lower: int
    footers: Footers
    task: str
    batches: list[int]
    schema: pa.Schema
    span: tuple[int, int]

    def expand(self) -> Iterator[RowGroup]:
        stamps = tuple(f"{s}.{ts}" for s, ts in stream_timestamps(self.schema).items())
        for batch in self.batches:
            for piece, path, metadata, groups in self.footers.pieces(self.task, batch):
                first = piece << PIECE_ROW_BITS
                for g, (rows, earliest, latest) in enumerate(groups.of(stamps)):
                    if earliest <= self.span[1] and latest >= self.span[0] and rows:
                        yield RowGroup(
                            max(self.lower, earliest), self.task, batch, self.footers.files, path, metadata, g, first
                        )
                    first += rows


class GroupTimes:
    """A footer's row groups as (rows, earliest, latest result time), worked out once per set of timestamp leaves:
    every query over a snapshot prunes all its batches' row groups by them (a tenth of the proxy's CPU for 1 s
    spans when read from the statistics each time)."""

    def __init__(self, metadata: pq.FileMetaData) -> None:
        self.metadata = metadata
        self._known: dict[tuple[str, ...], list[tuple[int, float, float]]] = {}

    def of(self, stamps: tuple[str, ...]) -> list[tuple[int, float, float]]:
        known = self._known.get(stamps)
        if known is None:
            groups = (self.metadata.row_group(g) for g in range(self.metadata.num_row_groups))
            known = self._known[stamps] = [(group.num_rows, *_bounds(group, stamps)) for group in groups]
        return known


class PieceFooter(NamedTuple):
    piece: int
    path: str
    metadata: pq.FileMetaData
    groups: GroupTimes


class Footers:
    """The files and footers of committed batches, read once per version of each batch's folder.

    A query over a snapshot looks at every batch the snapshot holds to prune row groups by their statistics:
    listing each batch's folder and reading each file's footer was half the proxy's CPU for 1 s spans (60 batches
    a snapshot). A committed batch's files never change (`ParquetSink` leaves a committed batch as it is); a
    folder written again (a new checkpoint's job clears the task and starts at batch 0) has a new version
    (`ResultFiles.version`), and is read again. At most `max_batches` folders are kept, the least recently used
    leaving first; queries share it from several threads."""

    def __init__(self, parquet: ResultLayout, max_batches: int = 4096) -> None:
        self.parquet = parquet
        self.files = parquet.files
        self.max_batches = max_batches
        self._kept: OrderedDict[str, tuple[Hashable, list[PieceFooter]]] = OrderedDict()
        self._lock = threading.Lock()

    def pieces(self, task: str, batch: int) -> list[PieceFooter]:
        """(piece, file, footer, its row groups' times) of a committed batch in piece order; FileNotFoundError
        when the batch left (its snapshot expired: the query reads again), `Damaged` when a footer cannot be read."""
        folder = self.parquet.batch_dir(task, batch)
        version = self.files.version(folder)
        with self._lock:
            kept = self._kept.get(folder)
            if kept is not None and kept[0] == version:
                self._kept.move_to_end(folder)
                return kept[1]
        found = []
        for piece, path in self.parquet.batch_pieces(task, batch):
            metadata = readable(task, batch, lambda path=path: self.files.read_metadata(path))
            found.append(PieceFooter(piece, path, metadata, GroupTimes(metadata)))
        with self._lock:
            self._kept[folder] = (version, found)
            self._kept.move_to_end(folder)
            while len(self._kept) > self.max_batches:
                self._kept.popitem(last=False)
        return found


def readable(task: str, batch: int, read: Callable[[], T]) -> T:
    """`read()` of a Parquet file of `task`'s batch `batch`; `Damaged` naming them when the file cannot be read
    (FileNotFoundError passes: the file left with its snapshot, and the query reads again)."""
    try:
        return read()
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as err:
        raise damaged(task, batch) from err


def damaged(task: str, batch: int) -> Damaged:
    """The error of a Parquet file of `task`'s batch `batch` that cannot be read."""
    return Damaged(
        f"task {task!r} batch {batch}: its Parquet results cannot be read (a damaged or truncated file); "
        "the operator must restore or remove that batch's files"
    )


def _bounds(group: Any, stamps: Sequence[str]) -> tuple[float, float]:
    """Bounds of the result times in a row group from its statistics ((-inf, inf) when they are missing): the
    result time is the latest stamp of the streams a row holds, so it is at most the largest stamp and at least
    the smallest stamp of a stream every row holds (no nulls), or of any stream (a row of an outer, semi or anti
    task may hold one stream alone; a stream null in every row adds nothing)."""
    paths = {group.column(i).path_in_schema: i for i in range(group.num_columns)}
    lowest, low, high = np.inf, -np.inf, -np.inf
    for leaf in stamps:
        stats = group.column(paths[leaf]).statistics if leaf in paths else None
        if stats is None or not stats.has_null_count:
            return -np.inf, np.inf
        if stats.null_count == group.num_rows:
            continue
        if not stats.has_min_max:
            return -np.inf, np.inf
        lowest, high = min(lowest, stats.min), max(high, stats.max)
        if stats.null_count == 0:
            low = max(low, stats.min)
    return max(lowest, low), high
