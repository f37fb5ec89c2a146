"""The order of a one-time query's rows, (result_time, batch_id, row): which keys come after or before a position,
and the first keys seen so far (bounded in rows and bytes), so that a read of the tiers keeps one page in memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.query.fields import Key


def after_mask(times: np.ndarray, batches: np.ndarray, rows: np.ndarray, key: Key) -> np.ndarray:
    """Which of the keys (times, batches, rows) come strictly after `key`."""
    t, b, r = key
    return (times > t) | ((times == t) & ((batches > b) | ((batches == b) & (rows > r))))


def before_mask(times: np.ndarray, batches: np.ndarray, rows: np.ndarray, key: Key) -> np.ndarray:
    """Which of the keys (times, batches, rows) come strictly before `key`."""
    t, b, r = key
    return (times < t) | ((times == t) & ((batches < b) | ((batches == b) & (rows < r))))


class FirstKeys:
    """The first keys offered so far, in key order: at most `n`, and past the first, at most `max_bytes` of rows
    (each key comes with its row's size); `where` holds (unit, position in the unit) per key, so that only the
    winners' rows are read at the end. `cut` once a key was left out for the bytes."""

    def __init__(self, n: int, max_bytes: int | None = None) -> None:
        self.n, self.max_bytes = n, max_bytes
        self.keys = np.zeros((0, 3), dtype=np.int64)
        self.where = np.zeros((0, 2), dtype=np.int64)
        self.sizes = np.zeros(0, dtype=np.int64)
        self.cut = False
        self._limit: Key | None = None  # the smallest key left out for the bytes: no key from it on may get in

    def worst(self) -> Key | None:
        """The largest key held once no later key can get in (`n` held, or some left out for the bytes)."""
        if len(self.keys) < self.n and not self.cut:
            return None
        t, b, r = self.keys[-1].tolist()
        return (t, b, r)

    def offer(
        self,
        times: np.ndarray,
        batches: np.ndarray,
        rows: np.ndarray,
        sizes: np.ndarray,
        unit: int,
        positions: np.ndarray,
    ) -> None:
        """Keys of the rows at `positions` of unit `unit`, with their sizes; the first ones of all stay."""
        keys = np.concatenate([self.keys, np.column_stack([times, batches, rows]).astype(np.int64)])
        where = np.column_stack([np.full(len(rows), unit), positions]).astype(np.int64)
        where = np.concatenate([self.where, where])
        sizes = np.concatenate([self.sizes, np.asarray(sizes, dtype=np.int64)])
        if self._limit is not None:  # the answer is a prefix in key order: nothing past a key left out
            below = before_mask(keys[:, 0], keys[:, 1], keys[:, 2], self._limit)
            keys, where, sizes = keys[below], where[below], sizes[below]
        order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))[: self.n]
        # cut: the key left out would be among the first n (fewer than n come before it)
        self.cut = self._limit is not None and len(order) < self.n
        if self.max_bytes is not None and len(order) > 1:
            fits = max(1, int(np.searchsorted(np.cumsum(sizes[order]), self.max_bytes, side="right")))
            if fits < len(order):
                self.cut = True
                t, b, r = keys[order[fits]].tolist()
                self._limit = (t, b, r)
                order = order[:fits]
        self.keys, self.where, self.sizes = keys[order], where[order], sizes[order]


@dataclass
class ReadBudget:
    """The bytes of row values a read in commit order may still take (the feed, a Parquet replay); its first row
    is taken whatever its size."""

    left: int
    rows: int = 0

    def take(self, sizes: np.ndarray) -> int:
        """How many of the next rows (of these sizes) fit; their bytes are taken, and all that is left once a row
        does not fit (the rows a read returns are consecutive)."""
        if not len(sizes):
            return 0
        ends = np.cumsum(sizes)
        fits = int(np.searchsorted(ends, self.left, side="right"))
        if not fits and not self.rows and len(sizes):
            fits = 1
        self.left = self.left - int(ends[fits - 1]) if fits == len(sizes) else 0
        self.rows += fits
        return fits
