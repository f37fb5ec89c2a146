"""Probing one block with a batch of tuples: indexed candidates checked exactly, or a tiled nested loop."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.index import BlockIndex, IndexPlan, WindowOrder
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.system_columns import SSEQ, TS, WSTART
from windjoin.operators.window import Block

MAX_CANDIDATES = 1 << 21  # candidate pairs expanded at once: bounds memory on hot keys
TILE_PROBES = 16  # nested-loop tile: TILE_PROBES x TILE_ROWS temporaries stay in L2
TILE_ROWS = 4096
WINDOW_COLUMNS = (TS, SSEQ, WSTART)  # system columns a window bounds (time, count, windows): an index may order by them

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class RangeFilter:
    """Per probe, the closed range [lo, hi] a stored tuple's system column must lie in (window, arrival order)."""

    column: str
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class Probe:
    """Tuples probing the opposite window: their columns, their window/arrival ranges, the task's predicates."""

    columns: dict[str, np.ndarray]
    filters: tuple[RangeFilter, ...]
    preds: tuple[ProbePredicate, ...]
    use_index: bool = True  # False forces the nested loop (the pairwise baseline S2J compares against)


@dataclass(frozen=True)
class Matches:
    """Pairs found in one block: probe rows, block rows, and how many candidate pairs were checked."""

    probe_rows: np.ndarray
    block_rows: np.ndarray
    comparisons: int


def probe_block(probe: Probe, block: Block) -> Matches:
    rows = _rows_reaching(probe, block)
    if len(rows) == 0:
        return Matches(_EMPTY, _EMPTY, 0)
    if not probe.use_index:
        return _nested_loop(probe, block, rows)
    window = _window_filter(probe)
    indexed = block.index_for(probe.preds, None if window is None else _window_order(window, block, rows))
    if indexed is None:
        return _nested_loop(probe, block, rows)
    return _indexed(probe, block, *indexed, rows, window)


def _window_filter(probe: Probe) -> RangeFilter | None:
    """The probe's window range (event time or count), which an index may order a block by."""
    return next((f for f in probe.filters if f.column in WINDOW_COLUMNS), None)


def _window_order(window: RangeFilter, block: Block, rows: np.ndarray) -> WindowOrder:
    """The window as the plan sees it. Its width is the widest range among the probe rows, rounded up to a power
    of two, so a block caches a few plans however the widths vary (an n-way join's partial results)."""
    zmin, zmax = block.zone[window.column]
    width = float(np.max(np.minimum(window.hi[rows], zmax) - np.maximum(window.lo[rows], zmin)))
    return WindowOrder(window.column, float(2.0 ** np.ceil(np.log2(max(width, 0.0) + 1.0))), zmax - zmin)


def _rows_reaching(probe: Probe, block: Block) -> np.ndarray:
    """Probe rows whose window/arrival ranges overlap the block's zone maps."""
    keep = np.ones(len(probe.filters[0].lo), dtype=bool) if probe.filters else None
    for f in probe.filters:
        zmin, zmax = block.zone[f.column]
        keep &= (f.lo <= zmax) & (f.hi >= zmin)
    return np.flatnonzero(keep)


def _indexed(
    probe: Probe, block: Block, plan: IndexPlan, index: BlockIndex, rows: np.ndarray, window: RangeFilter | None
) -> Matches:
    bounds = None if window is None else (window.lo, window.hi)
    prow, start, stop = index.ranges(plan, probe.columns, rows, bounds)
    counts = stop - start
    ends = np.cumsum(counts)
    found_p, found_q, compared, first = [], [], 0, 0
    while first < len(counts):
        # the largest run of ranges whose candidates fit MAX_CANDIDATES (at least one range)
        base = ends[first - 1] if first else 0
        last = max(first + 1, int(np.searchsorted(ends, base + MAX_CANDIDATES, side="right")))
        n = counts[first:last]
        p = np.repeat(prow[first:last], n)
        offsets = np.repeat(start[first:last] - (ends[first:last] - n - base), n)
        q = index.perm[np.arange(len(p)) + offsets]
        compared += len(q)
        p, q = _verify(probe, block, p, q)
        found_p.append(p)
        found_q.append(q)
        first = last
    if not found_p:
        return Matches(_EMPTY, _EMPTY, 0)
    return Matches(np.concatenate(found_p), np.concatenate(found_q), compared)


def _verify(probe: Probe, block: Block, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    for f in probe.filters:
        col = block.column(f.column)[q]
        keep = np.flatnonzero((col >= f.lo[p]) & (col <= f.hi[p]))
        p, q = p[keep], q[keep]
    for pred in probe.preds:
        keep = np.flatnonzero(pred.evaluate(block.column(pred.stored_field)[q], probe.columns[pred.probe_field][p]))
        p, q = p[keep], q[keep]
    return p, q


def _nested_loop(probe: Probe, block: Block, rows: np.ndarray) -> Matches:
    """Every probe against every stored row, in cache-sized tiles; range checks skipped where zone maps allow.

    Buffers are allocated once per call and reused by every tile, so the loop streams through L2.
    """
    found_p, found_q, compared = [], [], 0
    probe_vals = [probe.columns[pred.probe_field][rows] for pred in probe.preds]
    bounds = [(f.lo[rows], f.hi[rows]) for f in probe.filters]
    shape = (min(TILE_PROBES, len(rows)), min(TILE_ROWS, len(block)))
    mask, term = np.empty(shape, dtype=bool), np.empty(shape, dtype=bool)
    scratch = [
        np.empty(shape, dtype=np.result_type(block.column(p.stored_field).dtype, v.dtype))
        if p.op.uses_scratch
        else None
        for p, v in zip(probe.preds, probe_vals, strict=True)
    ]
    for r0 in range(0, len(block), TILE_ROWS):
        stored = [block.column(pred.stored_field)[r0 : r0 + TILE_ROWS] for pred in probe.preds]
        system = [block.column(f.column)[r0 : r0 + TILE_ROWS] for f in probe.filters]
        spans = [(int(col.min()), int(col.max())) for col in system]
        width = len(system[0])
        for t0 in range(0, len(rows), TILE_PROBES):
            t1 = min(t0 + TILE_PROBES, len(rows))
            m, t = mask[: t1 - t0, :width], term[: t1 - t0, :width]
            m.fill(True)  # then AND in each check: a pass over L2-resident bools, cheap beside the compares
            for (lo, hi), col, (cmin, cmax) in zip(bounds, system, spans, strict=True):
                lo_t, hi_t = lo[t0:t1, None], hi[t0:t1, None]
                if lo_t.max() <= cmin and hi_t.min() >= cmax:
                    continue  # the whole tile is inside every probe's range
                m &= np.greater_equal(col, lo_t, out=t)
                m &= np.less_equal(col, hi_t, out=t)
            for pred, vals, col, buf in zip(probe.preds, probe_vals, stored, scratch, strict=True):
                diff = None if buf is None else buf[: t1 - t0, :width]
                m &= pred.evaluate(col, vals[t0:t1, None], out=t, scratch=diff)
            compared += m.size
            hits = np.flatnonzero(m)  # far faster than np.nonzero on a 2-D mask
            if len(hits):
                ii, jj = np.divmod(hits, width)
                found_p.append(rows[t0 + ii])
                found_q.append(r0 + jj)
    if not found_p:
        return Matches(_EMPTY, _EMPTY, 0)
    return Matches(np.concatenate(found_p), np.concatenate(found_q), compared)
