"""Columnar tuples of one stream, carrying the arrival order the join semantics depend on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TupleBatch:
    """Tuples of one stream as numpy columns.

    `seq` numbers arrivals across all streams (it decides which tuple of a pair came later); `sseq` numbers
    arrivals within the stream (count windows are ranges of it); `arrival_ns` is the wall-clock arrival, for
    production delay. `columns` holds the timestamp column under `ts_field` plus the declared fields.
    """

    columns: Mapping[str, np.ndarray]
    ts_field: str
    seq: np.ndarray
    sseq: np.ndarray
    arrival_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def ts(self) -> np.ndarray:
        return self.columns[self.ts_field]

    def take(self, rows: np.ndarray) -> TupleBatch:
        return TupleBatch(
            {name: col[rows] for name, col in self.columns.items()},
            self.ts_field,
            self.seq[rows],
            self.sseq[rows],
            self.arrival_ns[rows],
        )

    @staticmethod
    def concat(batches: Sequence[TupleBatch]) -> TupleBatch:
        first = batches[0]
        if len(batches) == 1:
            return first
        return TupleBatch(
            {name: np.concatenate([b.columns[name] for b in batches]) for name in first.columns},
            first.ts_field,
            np.concatenate([b.seq for b in batches]),
            np.concatenate([b.sseq for b in batches]),
            np.concatenate([b.arrival_ns for b in batches]),
        )


@dataclass(frozen=True)
class Arrivals:
    """One stream's share of an input chunk: its columns and each row's position in the chunk's arrival order.

    `stored` (default: every row) marks the rows this join keeps in its window; the others only probe. A group
    spread over k joins (SplitJoin) stores each tuple at one of them and probes at all: every pair is then
    found once, where its earlier tuple is stored."""

    columns: Mapping[str, np.ndarray]
    order: np.ndarray
    arrival_ns: np.ndarray | None = None
    stored: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.order)


def check_arrival_order(chunk: Mapping[str, Arrivals]) -> int:
    """The chunk's length, after checking the streams' positions form one arrival order 0..n-1."""
    total = sum(len(a) for a in chunk.values())
    if total:
        positions = np.concatenate([np.asarray(a.order, dtype=np.int64) for a in chunk.values()])
        if not np.array_equal(np.sort(positions), np.arange(total)):
            raise ValueError("arrival positions of a chunk must be a permutation of 0..n-1 across its streams")
    return total
