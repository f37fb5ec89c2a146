"""A batch's production delays as an exact histogram: each distinct delay (ms) with how many results had it.

The slots report their delays this way so the driver's share stays small however many results a batch has
(delays repeat: a slot stamps one emission time per batch, and result times are milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Delays:
    """Distinct delays (ms, ascending) and their counts."""

    values: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def merge(cls, parts: Iterable[Sequence[Sequence[int]]]) -> Delays:
        """One histogram from the slots' [values, counts] pairs."""
        parts = list(parts)
        values = np.concatenate([np.zeros(0, np.int64), *(np.asarray(v, np.int64) for v, _ in parts)])
        counts = np.concatenate([np.zeros(0, np.int64), *(np.asarray(c, np.int64) for _, c in parts)])
        unique, where = np.unique(values, return_inverse=True)
        return cls(unique, np.bincount(where, weights=counts, minlength=len(unique)).astype(np.int64))

    @classmethod
    def of(cls, delays_ms: np.ndarray) -> Delays:
        """The histogram of plain delays (tests, benchmarks)."""
        values, counts = np.unique(np.asarray(delays_ms, np.int64), return_counts=True)
        return cls(values, counts.astype(np.int64))

    def __len__(self) -> int:
        """How many results the delays are of."""
        return int(self.counts.sum())

    def percentile(self, q: float | Sequence[float]) -> np.ndarray:
        """The delay at percentile `q` (0-100) by the nearest-rank rule on the exact distribution; ValueError
        when empty."""
        if not len(self):
            raise ValueError("no delays: the batch had no results")
        ranks = np.ceil(np.asarray(q, np.float64) / 100 * len(self)).clip(1, len(self)).astype(np.int64)
        return self.values[np.searchsorted(np.cumsum(self.counts), ranks, side="left")]

    def expanded(self) -> np.ndarray:
        """Every result's delay, ascending (as many values as results: for small batches and tests)."""
        return np.repeat(self.values, self.counts)
