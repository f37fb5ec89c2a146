"""The order of a one-time query's rows, (result_time, batch_id, row): which keys come after or before a position,
and the first `n` rows or keys seen so far, so that a read of either tier keeps one page in memory."""

from __future__ import annotations

import heapq
from typing import Any

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


class FirstRows:
    """The `n` rows with the smallest keys pushed so far (a bounded heap); `dropped` once one was left out."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._heap: list[tuple[Key, int, dict[str, Any]]] = []  # negated keys: the worst on top
        self.dropped = False

    def push(self, key: Key, row: dict[str, Any]) -> None:
        item = ((-key[0], -key[1], -key[2]), id(row), row)
        if len(self._heap) < self.n:
            heapq.heappush(self._heap, item)
            return
        self.dropped = True
        if item[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, item)

    def worst_time(self) -> int | None:
        """The result time of the largest key held, once `n` rows are held (None before)."""
        return -self._heap[0][0][0] if len(self._heap) >= self.n else None

    def rows(self) -> list[dict[str, Any]]:
        """The rows held, in key order."""
        return [row for _, _, row in sorted(self._heap, key=lambda item: item[0], reverse=True)]


class FirstKeys:
    """The `n` smallest keys offered so far, in order, and where their rows are: `where` holds (file, row group,
    position in the group) per key, so that only the winners' rows are read at the end."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.keys = np.zeros((0, 3), dtype=np.int64)
        self.where = np.zeros((0, 3), dtype=np.int64)

    def worst(self) -> Key | None:
        """The largest key held once `n` are held (None before)."""
        if len(self.keys) < self.n:
            return None
        t, b, r = self.keys[-1].tolist()
        return (t, b, r)

    def offer(
        self, times: np.ndarray, batches: np.ndarray, rows: np.ndarray, file: int, group: int, positions: np.ndarray
    ) -> None:
        """Keys of rows at `positions` of row group `group` of file `file`; the smallest `n` of all stay."""
        keys = np.concatenate([self.keys, np.column_stack([times, batches, rows]).astype(np.int64)])
        where = np.column_stack([np.full(len(rows), file), np.full(len(rows), group), positions]).astype(np.int64)
        where = np.concatenate([self.where, where])
        order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))[: self.n]
        self.keys, self.where = keys[order], where[order]
