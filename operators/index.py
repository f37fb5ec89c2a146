"""Indexes over an immutable block of stored tuples, and the choice of which predicates drive the probe.

One structure serves every indexable case: a sorted array of compound keys `group * span + order`, where
`group` comes from a hash table (equality) or from buckets of width 2w (band), and `order` is a numeric
column searched by range (band, <, <=, >, >=, or a second equality). A probe asks for one key range per
(probe, group); the rows found are a superset of the matches (keys are floats, ranges are widened), and
every predicate is then checked exactly. Equality alone is a pure hash lookup, one band alone a sorted
range, and two predicates together cut the candidates by both (S2J's main + auxiliary predicates, with
the most selective pair driving). A group with no ordering predicate is ordered by the probe's window
column instead (event time or arrival number: S2J's ordered index on the window), so a block spanning far
more than the window hands each probe only its window's rows; with no indexable predicate at all the
window column alone orders the block and a probe is a range search instead of a scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np
import pandas as pd

from windjoin.operators.predicate_ops import IndexKind
from windjoin.operators.predicates import ProbePredicate

# The largest share of a block a window may cover for the window column alone to index it (no indexable
# predicate). An indexed candidate is gathered and checked one by one, ~30x the cost of a nested-loop comparison
# made in cache-sized tiles: measured on a theta join of 512 probes into a 20k-row block, the range search wins
# below ~1/45 of the block; widths are rounded up to a power of two (kernel._window_order), hence 1/32.
WINDOW_ONLY_FRACTION = 1 / 32


@dataclass(frozen=True)
class IndexPlan:
    """Which predicate groups the stored rows (hash, or buckets of bounded ranges) and which one orders them."""

    group: ProbePredicate | None
    order: ProbePredicate | None
    window: str | None = None  # with no `order`: the system column the probe's window bounds orders the rows

    @property
    def key(self) -> tuple[object, ...]:
        """Identity of the index built: tasks whose plans share it share the index on a block."""
        group = None if self.group is None else (_hashed(self.group), self.group.stored_field, _bucket(self.group))
        order = None if self.order is None else self.order.stored_field
        return group, order, self.window

    @property
    def order_column(self) -> str | None:
        """The block column searched by range: the ordering predicate's, else the window's."""
        return self.order.stored_field if self.order is not None else self.window


@dataclass(frozen=True)
class WindowOrder:
    """A probe's window as an index sees it: the system column it bounds, the width of one probe's closed
    range on it, and the block's span of that column (its zone map's max - min)."""

    column: str
    width: float
    span: int

    @property
    def fraction(self) -> float:
        """The share of the block one probe's window covers: the window's selectivity (values spread evenly)."""
        return min(1.0, (self.width + 1.0) / (self.span + 1.0))

    def fits(self, rows: int) -> bool:
        """Compound keys stay exact integers in float64 (group codes below `rows`, see `BlockIndex`)."""
        return rows * (2.0 * self.span + 1.0) < 2.0**52


def _hashed(pred: ProbePredicate) -> bool:
    """Groups are the stored values themselves (else buckets of a bounded range)."""
    return pred.op.index is IndexKind.HASH


def _bucket(pred: ProbePredicate) -> float:
    """Bucket width of a grouping ordered op: a probe's range then spans at most two buckets."""
    return pred.op.bucket_width(pred.width) or 1.0


def _is_numeric(col: np.ndarray) -> bool:
    return col.dtype.kind in "iuf"


def _indexable(pred: ProbePredicate, col: np.ndarray) -> bool:
    """Hash ops index any type; ordered ops need numbers (their keys are floats)."""
    return _hashed(pred) or (pred.op.index is IndexKind.ORDERED and _is_numeric(col))


def choose_plan(
    preds: list[ProbePredicate], columns: dict[str, np.ndarray], window: WindowOrder | None = None
) -> IndexPlan | None:
    """The cheapest plan by expected candidates per probe (as a fraction of the block), or None: nested loop.

    A group without an ordering predicate is ordered by the window column when there is one: that costs
    nothing at build or probe time and cuts its candidates by the window's fraction of the block, which is
    also what decides between it and a group ordered by a second predicate. The window column alone is worth
    it only when the window is a small part of the block (`WINDOW_ONLY_FRACTION`): an indexed candidate costs
    several times a nested-loop comparison.
    """
    if window is not None and not window.fits(len(next(iter(columns.values()), ()))):
        window = None
    sel = {p: p.selectivity(columns[p.stored_field]) for p in preds if _indexable(p, columns[p.stored_field])}
    groupable = [p for p in sel if _hashed(p) or p.op.bucket_width(p.width) is not None]
    orderable = [p for p in sel if _is_numeric(columns[p.stored_field])]
    options: list[tuple[float, int, IndexPlan]] = []
    if window is not None and window.fraction <= WINDOW_ONLY_FRACTION:
        options.append((window.fraction, 1, IndexPlan(None, None, window.column)))
    in_window, column = (1.0, None) if window is None else (window.fraction, window.column)
    for g in groupable:
        options.append((_group_cost(g, sel[g]) * in_window, 1, IndexPlan(g, None, column)))
    for o in orderable:
        options.append((sel[o], 1, IndexPlan(None, o)))
    for g, o in permutations(sel, 2):
        if g in groupable and o in orderable:
            options.append((_group_cost(g, sel[g]) * sel[o], 2, IndexPlan(g, o)))
    return min(options, key=lambda option: option[:2])[2] if options else None


def _group_keys(pred: ProbePredicate, values: np.ndarray) -> np.ndarray:
    if not _hashed(pred):
        return np.floor(values.astype(np.float64) / _bucket(pred)).astype(np.int64)
    if _is_numeric(values):
        return values.astype(np.float64) + 0.0  # ints and floats compare equal when equal; +0.0 folds -0.0
    return values


def _group_cost(pred: ProbePredicate, selectivity: float) -> float:
    return selectivity if _hashed(pred) else min(1.0, 2.0 * selectivity)  # a bucket pair is twice the range


class BlockIndex:
    """The compound-key index of one block (see the module docstring).

    Built for one plan, it serves every plan with the same `key`: probing takes the plan whose predicates
    give the ranges, since tasks sharing the structure may bound it differently (say a band and a `<`).
    """

    def __init__(self, plan: IndexPlan, columns: dict[str, np.ndarray]) -> None:
        n = len(next(iter(columns.values())))
        if plan.group is not None:
            codes, uniques = pd.factorize(_group_keys(plan.group, columns[plan.group.stored_field]))
            self._groups = pd.Index(uniques)
        else:
            codes, self._groups = np.zeros(n, dtype=np.int64), None
        column = plan.order_column
        order = columns[column].astype(np.float64) if column is not None else np.zeros(n)
        self._omin = float(order.min()) if n else 0.0
        self._omax = float(order.max()) if n else 0.0
        # Groups sit 2*range + 1 apart, far more than float rounding can blur at any realistic group count.
        self._span = 2.0 * (self._omax - self._omin) + 1.0
        keys = codes * self._span + (order - self._omin)
        self.perm = np.argsort(keys)
        self._keys = keys[self.perm]

    def ranges(
        self,
        plan: IndexPlan,
        probe_cols: dict[str, np.ndarray],
        probe_rows: np.ndarray,
        window: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, ...]:
        """(probe row, start, stop) triples: sorted positions [start, stop) hold every match of that probe.

        `window` is every probe's closed range on `plan.window` (needed when the plan is ordered by it).
        """
        rows, groups = self._probe_groups(plan.group, probe_cols, probe_rows)
        if plan.order is not None or plan.window is not None:
            if plan.order is not None:
                lo, hi = plan.order.value_range(probe_cols[plan.order.probe_field][rows])
            else:
                lo, hi = window[0][rows].astype(np.float64), window[1][rows].astype(np.float64)
            lo, hi = np.maximum(lo, self._omin), np.minimum(hi, self._omax)
        else:
            lo = hi = np.zeros(len(rows))
        keep = lo <= hi
        rows, groups, lo, hi = rows[keep], groups[keep], lo[keep], hi[keep]
        base = groups * self._span  # same float operations as the stored keys, so rounding is monotone alike
        first, last = base + (lo - self._omin), base + (hi - self._omin)
        by_key = np.argsort(first)  # sorted needles let searchsorted walk the keys cache-friendly
        start, stop = np.empty(len(first), dtype=np.int64), np.empty(len(first), dtype=np.int64)
        start[by_key] = np.searchsorted(self._keys, first[by_key], side="left")
        stop[by_key] = np.searchsorted(self._keys, last[by_key], side="right")
        keep = start < stop
        return rows[keep], start[keep], stop[keep]

    def _probe_groups(
        self, pred: ProbePredicate | None, probe_cols: dict[str, np.ndarray], rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        if pred is None:
            return rows, np.zeros(len(rows), dtype=np.int64)
        values = probe_cols[pred.probe_field][rows]
        if _hashed(pred):
            found = self._groups.get_indexer(_group_keys(pred, values))
            keep = found >= 0
            return rows[keep], found[keep]
        lo, hi = pred.value_range(values)
        width = _bucket(pred)
        first = np.floor(lo / width).astype(np.int64)
        last = np.floor(hi / width).astype(np.int64)
        out_rows, out_groups = [], []
        for step in range(int((last - first).max(initial=-1)) + 1):
            bucket = first + step
            live = bucket <= last
            found = self._groups.get_indexer(bucket[live])
            hit = found >= 0
            out_rows.append(rows[live][hit])
            out_groups.append(found[hit])
        if not out_rows:
            return rows[:0], np.zeros(0, dtype=np.int64)
        return np.concatenate(out_rows), np.concatenate(out_groups)
