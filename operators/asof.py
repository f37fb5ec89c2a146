"""The as-of (temporal) join of one task: each left tuple with the right tuple of greatest event time at or before
its own among those meeting the task's equalities (the "table" row valid at that time), ties in time won by the
later arrival; a version older than `max_age_ms` is no version.

A left tuple waits until the watermark has passed its time: every right tuple that could still be its version has
arrived by then (a later one at or before its time is late, and refused), so what it pairs with does not depend on
arrival order or on how the input is cut into chunks. Then it comes out paired (`asof`, `asof_left`) or alone with
the right side null (`asof_left` only). The state holds the left tuples still waiting and, per key, the versions a
waiting or later left tuple can still reach: every version at or above the watermark and the newest below it. So
it grows with the number of keys, not with time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.batch import TupleBatch
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.spec import TaskSpec

AS_OF_TYPES = ("asof", "asof_left")


@dataclass(frozen=True)
class Emitted:
    """What came out: the left tuples with a version and their versions (row for row), and those without one."""

    left: TupleBatch
    right: TupleBatch
    alone: TupleBatch


class AsofState:
    """The waiting left tuples and the right versions of one as-of task (see the module docstring)."""

    def __init__(self, task: TaskSpec, empty: dict[str, TupleBatch]) -> None:
        self.left_stream, self.right_stream = task.join
        self.max_age_ms = task.max_age_ms
        preds = [ProbePredicate.orient(p, self.left_stream) for p in task.on]
        self.left_keys = [p.probe_field for p in preds]  # eq on each (the spec checks): the table's key
        self.right_keys = [p.stored_field for p in preds]
        self.waiting = empty[self.left_stream]
        self.versions = empty[self.right_stream]

    def __len__(self) -> int:
        """Tuples held: waiting left tuples and right versions."""
        return len(self.waiting) + len(self.versions)

    def add(self, left: TupleBatch | None, right: TupleBatch | None) -> None:
        """Take arrived tuples (in arrival order); they may carry columns beyond the stream's (a pooled state's
        partition), which an empty state takes on."""
        if left is not None and len(left):
            self.waiting = TupleBatch.concat([self.waiting, left]) if len(self.waiting) else left
        if right is not None and len(right):
            self.versions = TupleBatch.concat([self.versions, right]) if len(self.versions) else right

    def recall(self, watermark_ms: int | None) -> None:
        """State rebuilt from its stored tuples (`add` of every one) as it stood after emitting at `watermark_ms`:
        the left tuples it had passed were emitted then, so they wait no more."""
        if watermark_ms is not None:
            self.waiting = self.waiting.take(np.flatnonzero(self.waiting.ts >= watermark_ms))
            self._forget(watermark_ms)

    def drop_where(self, column: str, value: int) -> None:
        """Forget the tuples whose `column` equals `value` (a partition leaving a state that pools several)."""
        self.waiting = self.waiting.take(np.flatnonzero(self.waiting.columns[column] != value))
        self.versions = self.versions.take(np.flatnonzero(self.versions.columns[column] != value))

    def emit(self, watermark_ms: float | None) -> Emitted:
        """Take the waiting left tuples the watermark has passed (all of them for +inf: a complete input), each
        with its version, in arrival order; then forget the versions no later left tuple can reach."""
        none = self.waiting.take(np.zeros(0, dtype=np.int64))
        if watermark_ms is None or not len(self.waiting):
            self._forget(watermark_ms)
            return Emitted(none, self.versions.take(np.zeros(0, dtype=np.int64)), none)
        ready = np.flatnonzero(self.waiting.ts < watermark_ms)
        ready = ready[np.argsort(self.waiting.seq[ready], kind="stable")]
        taken = self.waiting.take(ready)
        self.waiting = self.waiting.take(np.setdiff1d(np.arange(len(self.waiting)), ready))
        version = self._versions_of(taken)
        found = version >= 0
        if self.max_age_ms is not None and found.any():
            age = taken.ts.astype(np.int64) - self.versions.ts.astype(np.int64)[np.maximum(version, 0)]
            found &= age <= self.max_age_ms
        paired = np.flatnonzero(found)
        right = self.versions.take(version[paired])
        self._forget(watermark_ms)
        return Emitted(taken.take(paired), right, taken.take(np.flatnonzero(~found)))

    def _versions_of(self, lefts: TupleBatch) -> np.ndarray:
        """Per left tuple, the row in `versions` of its version (-1: none): sorted by (key, ts, arrival) with the
        left tuples among them (a version at a left tuple's very time before it), the last version before each
        left tuple within its key."""
        n, m = len(lefts), len(self.versions)
        keys = self._key_codes(lefts, n, m)
        ts = np.concatenate([lefts.ts, self.versions.ts]).astype(np.int64)
        is_left = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(m, dtype=np.int8)])
        seq = np.concatenate([lefts.seq, self.versions.seq])
        order = np.lexsort((seq, is_left, ts, keys))
        position = np.arange(n + m)
        last_version = np.where(is_left[order] == 0, position, -1)
        last_version = np.maximum.accumulate(last_version)
        result = np.full(n, -1, dtype=np.int64)
        at = np.flatnonzero(is_left[order] == 1)
        before = last_version[at]
        same_key = (before >= 0) & (keys[order][np.maximum(before, 0)] == keys[order][at])
        rows = order[at]  # the left tuples' own rows (0..n-1)
        result[rows[same_key]] = order[before[same_key]] - n
        return result

    def _key_codes(self, lefts: TupleBatch, n: int, m: int) -> np.ndarray:
        """One int per tuple (the n left tuples, then the m versions) equal exactly when every key field is equal."""
        if not self.left_keys:
            return np.zeros(n + m, dtype=np.int64)
        codes = []
        for lk, rk in zip(self.left_keys, self.right_keys, strict=True):
            values = np.concatenate([np.asarray(lefts.columns[lk]), np.asarray(self.versions.columns[rk])])
            codes.append(np.unique(values, return_inverse=True)[1].reshape(-1))
        if len(codes) == 1:
            return codes[0].astype(np.int64)
        return np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

    def _forget(self, watermark_ms: float | None) -> None:
        """Keep, per key, every version at or above the watermark and the newest (latest arrival among equal
        times) below it, unless that is older than the watermark less `max_age_ms`."""
        m = len(self.versions)
        if watermark_ms is None or not m:
            return
        empty = self.waiting.take(np.zeros(0, dtype=np.int64))
        keys = self._key_codes(empty, 0, m)
        ts = self.versions.ts.astype(np.int64)
        order = np.lexsort((self.versions.seq, ts, keys))
        below = ts[order] < watermark_ms
        next_differs = np.append(keys[order][1:] != keys[order][:-1], True)
        next_above = np.append(~below[1:], True)
        newest_below = below & (next_differs | next_above)
        if self.max_age_ms is not None:
            newest_below &= ts[order] >= watermark_ms - self.max_age_ms
        keep = np.sort(order[~below | newest_below])
        if len(keep) < m:
            self.versions = self.versions.take(keep)
