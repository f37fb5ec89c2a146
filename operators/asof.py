"""The as-of (temporal) join of one task: each left tuple with the right tuple of greatest event time at or before
its own among those meeting the task's equalities (the "table" row valid at that time), ties in time won by the
later arrival; a version older than `max_age_ms` is no version.

A left tuple waits until the watermark has passed its time: every right tuple that could still be its version has
arrived by then (a later one at or before its time is late, and refused), so what it pairs with does not depend on
arrival order or on how the input is cut into chunks. Then it comes out paired (`asof`, `asof_left`) or alone with
the right side null (`asof_left` only).

The state holds the left tuples still waiting, the versions at or above the last watermark (`recent`: an arriving
tuple is never below it), and per key the newest version below it (`base`, one row a key, sorted by a hash of the
key's values). So it grows with the number of keys, not with time, and a chunk's work is its own tuples plus a
search of `base`: a left tuple's version is its newest recent one at or before it if any (every recent version is
newer than every base one), else its key's base version.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from windjoin.operators.batch import TupleBatch
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.spec import TaskSpec

_NONE = np.zeros(0, dtype=np.int64)


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
        self.recent = empty[self.right_stream]
        self.base = empty[self.right_stream]
        self._base_hash = np.zeros(0, dtype=np.uint64)

    @property
    def versions(self) -> TupleBatch:
        """Every version held: each key's newest below the last watermark, and those at or above it."""
        return _concat(self.base, self.recent)

    def __len__(self) -> int:
        """Tuples held: waiting left tuples and versions."""
        return len(self.waiting) + len(self.base) + len(self.recent)

    def add(self, left: TupleBatch | None, right: TupleBatch | None) -> None:
        """Take arrived tuples (in arrival order); they may carry columns beyond the stream's (a pooled state's
        partition), which an empty state takes on."""
        if left is not None and len(left):
            self.waiting = _concat(self.waiting, left)
        if right is not None and len(right):
            self.recent = _concat(self.recent, right)

    def recall(self, watermark_ms: int | None) -> None:
        """State rebuilt from its stored tuples (`add` of every one) as it stood after emitting at `watermark_ms`:
        the left tuples it had passed were emitted then, so they wait no more."""
        if watermark_ms is not None:
            self.waiting = self.waiting.take(np.flatnonzero(self.waiting.ts >= watermark_ms))
            self._advance(watermark_ms)

    def drop_where(self, column: str, value: int) -> None:
        """Forget the tuples whose `column` equals `value` (a partition leaving a state that pools several)."""

        def kept(tuples: TupleBatch) -> np.ndarray:  # an empty batch may lack the column
            return np.flatnonzero(tuples.columns[column] != value) if len(tuples) else _NONE

        self.waiting, self.recent = self.waiting.take(kept(self.waiting)), self.recent.take(kept(self.recent))
        keep = kept(self.base)
        self.base, self._base_hash = self.base.take(keep), self._base_hash[keep]

    def emit(self, watermark_ms: float | None) -> Emitted:
        """Take the waiting left tuples the watermark has passed (all of them for +inf: a complete input), each
        with its version, in arrival order; then forget the versions no later left tuple can reach."""
        none = self.waiting.take(_NONE)
        if watermark_ms is None:
            return Emitted(none, self.recent.take(_NONE), none)
        ready = np.flatnonzero(self.waiting.ts < watermark_ms)
        ready = ready[np.argsort(self.waiting.seq[ready], kind="stable")]
        taken = self.waiting.take(ready)
        self.waiting = self.waiting.take(np.setdiff1d(np.arange(len(self.waiting)), ready))
        from_recent = _latest_at_or_before(taken, self.left_keys, self.recent, self.right_keys)
        from_base = self._base_rows(taken, from_recent < 0)
        found = (from_recent >= 0) | (from_base >= 0)
        ts = np.where(
            from_recent >= 0,
            self.recent.ts.astype(np.int64)[np.maximum(from_recent, 0)] if len(self.recent) else 0,
            self.base.ts.astype(np.int64)[np.maximum(from_base, 0)] if len(self.base) else 0,
        )
        if self.max_age_ms is not None:
            found &= taken.ts.astype(np.int64) - ts <= self.max_age_ms
        paired = np.flatnonzero(found)
        recent_rows, base_rows = from_recent[paired], from_base[paired]
        right = _concat(self.recent.take(recent_rows[recent_rows >= 0]), self.base.take(base_rows[recent_rows < 0]))
        order = np.concatenate([np.flatnonzero(recent_rows >= 0), np.flatnonzero(recent_rows < 0)])
        right = right.take(np.argsort(order, kind="stable"))  # back in the left tuples' order
        self._advance(watermark_ms)
        return Emitted(taken.take(paired), right, taken.take(np.flatnonzero(~found)))

    def _base_rows(self, lefts: TupleBatch, wanted: np.ndarray) -> np.ndarray:
        """Per left tuple (where `wanted`), the row of its key's base version (-1: none)."""
        out = np.full(len(lefts), -1, dtype=np.int64)
        at = np.flatnonzero(wanted)
        if len(at) and len(self.base):
            out[at] = _find(self._base_hash, self.base, self.right_keys, lefts.take(at), self.left_keys)
        return out

    def _advance(self, watermark_ms: float) -> None:
        """The recent versions below the watermark folded into `base` (each key's newest replaces its old one),
        and with `max_age_ms` the base versions too old for any later left tuple dropped."""
        below = self.recent.ts < watermark_ms
        if below.any():
            folding = self.recent.take(np.flatnonzero(below))
            self.recent = self.recent.take(np.flatnonzero(~below))
            codes = _codes([folding.columns[k] for k in self.right_keys], len(folding))
            order = np.lexsort((folding.seq, folding.ts.astype(np.int64), codes))
            last = order[np.append(codes[order][1:] != codes[order][:-1], True)]
            self._upsert(folding.take(last))
        if self.max_age_ms is not None and len(self.base):
            keep = np.flatnonzero(self.base.ts.astype(np.int64) >= watermark_ms - self.max_age_ms)
            if len(keep) < len(self.base):
                self.base, self._base_hash = self.base.take(keep), self._base_hash[keep]

    def _upsert(self, newest: TupleBatch) -> None:
        """Each key's newest version (one row a key) into `base`: replacing the key's row, or inserted in hash
        order."""
        hashes = _hash([newest.columns[k] for k in self.right_keys], len(newest))
        if not len(self.base):  # it takes on the new rows' columns (a pooled state's partition)
            order = np.argsort(hashes, kind="stable")
            self.base, self._base_hash = newest.take(order), hashes[order]
            return
        at = _find(self._base_hash, self.base, self.right_keys, newest, self.right_keys, hashes)
        replace = np.flatnonzero(at >= 0)
        if len(replace):
            columns = {n: c.copy() for n, c in self.base.columns.items()}
            for name, column in columns.items():
                column[at[replace]] = newest.columns[name][replace]
            seq, sseq, arrival = self.base.seq.copy(), self.base.sseq.copy(), self.base.arrival_ns.copy()
            seq[at[replace]], sseq[at[replace]] = newest.seq[replace], newest.sseq[replace]
            arrival[at[replace]] = newest.arrival_ns[replace]
            self.base = TupleBatch(columns, self.base.ts_field, seq, sseq, arrival)
        insert = np.flatnonzero(at < 0)
        if len(insert):
            insert = insert[np.argsort(hashes[insert], kind="stable")]
            where = np.searchsorted(self._base_hash, hashes[insert])
            new = newest.take(insert)
            self.base = TupleBatch(
                {n: np.insert(c, where, new.columns[n]) for n, c in self.base.columns.items()},
                self.base.ts_field,
                np.insert(self.base.seq, where, new.seq),
                np.insert(self.base.sseq, where, new.sseq),
                np.insert(self.base.arrival_ns, where, new.arrival_ns),
            )
            self._base_hash = np.insert(self._base_hash, where, hashes[insert])


def _concat(first: TupleBatch, second: TupleBatch) -> TupleBatch:
    """Both batches' tuples; an empty one takes the other's columns (it may lack a pooled state's partition)."""
    if not len(first):
        return second
    return first if not len(second) else TupleBatch.concat([first, second])


def _latest_at_or_before(lefts: TupleBatch, left_keys: list[str], versions: TupleBatch, right_keys: list[str]):
    """Per left tuple, the row in `versions` of the one with equal keys and the greatest (time, arrival) at or
    before its time (-1: none): both sorted by (key, time, versions first, arrival), the last version before each
    left tuple within its key."""
    n, m = len(lefts), len(versions)
    result = np.full(n, -1, dtype=np.int64)
    if not n or not m:
        return result
    keys = _codes(
        [
            np.concatenate([np.asarray(lefts.columns[a]), np.asarray(versions.columns[b])])
            for a, b in zip(left_keys, right_keys, strict=True)
        ],
        n + m,
    )
    ts = np.concatenate([lefts.ts, versions.ts]).astype(np.int64)
    is_left = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(m, dtype=np.int8)])
    order = np.lexsort((np.concatenate([lefts.seq, versions.seq]), is_left, ts, keys))
    last_version = np.maximum.accumulate(np.where(is_left[order] == 0, np.arange(n + m), -1))
    at = np.flatnonzero(is_left[order] == 1)
    before = last_version[at]
    same_key = (before >= 0) & (keys[order][np.maximum(before, 0)] == keys[order][at])
    result[order[at][same_key]] = order[before[same_key]] - n
    return result


def _codes(columns: list[np.ndarray], n: int) -> np.ndarray:
    """One int per row, equal exactly when every column's value is equal (ints and floats as numbers)."""
    if not columns:
        return np.zeros(n, dtype=np.int64)
    codes = [np.unique(np.asarray(c), return_inverse=True)[1].reshape(-1) for c in columns]
    if len(codes) == 1:
        return codes[0].astype(np.int64)
    return np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _hash(columns: list[np.ndarray], n: int) -> np.ndarray:
    """A 64-bit hash of each row's key values, equal for equal values (an int and the float of it alike)."""
    out = np.zeros(n, dtype=np.uint64)
    for column in columns:
        column = np.asarray(column)
        if column.dtype == object:
            part = pd.util.hash_array(column, categorize=False)
        else:
            part = (column.astype(np.float64) + 0.0).view(np.uint64)  # + 0.0: -0.0 hashes as 0.0
            part = part ^ (part >> np.uint64(31))
        out = (out ^ part) * np.uint64(0x9E3779B97F4A7C15)
        out ^= out >> np.uint64(29)
    return out


def _find(
    base_hash: np.ndarray,
    base: TupleBatch,
    base_keys: list[str],
    probes: TupleBatch,
    probe_keys: list[str],
    hashes: np.ndarray | None = None,
) -> np.ndarray:
    """Per probe, the row of `base` (sorted by `base_hash`) whose key values equal its own (-1: none)."""
    hashes = _hash([probes.columns[k] for k in probe_keys], len(probes)) if hashes is None else hashes
    lo = np.searchsorted(base_hash, hashes, side="left")
    hi = np.searchsorted(base_hash, hashes, side="right")
    out = np.full(len(probes), -1, dtype=np.int64)
    one = np.flatnonzero(hi - lo == 1)
    equal = np.ones(len(one), dtype=bool)
    for b, p in zip(base_keys, probe_keys, strict=True):
        equal &= np.asarray(base.columns[b])[lo[one]] == np.asarray(probes.columns[p])[one]
    out[one[equal]] = lo[one[equal]]
    for i in np.flatnonzero(hi - lo > 1).tolist():  # a hash shared by several keys: rare, checked one by one
        for row in range(lo[i], hi[i]):
            if all(base.columns[b][row] == probes.columns[p][i] for b, p in zip(base_keys, probe_keys, strict=True)):
                out[i] = row
    return out
