"""How many records the next micro-batch takes for a latency target (S2J's Problem 1, the tuple-block size).

A batch of n records takes about F + c*n seconds (a fixed cost F and a per-record cost c, fitted to the recent
batches). Running back to back, a record waits for the batch after its arrival to start, then for that batch to
emit: its delay is up to about two batch times. So batches of at most n* = (target/2 - F) / c keep the delay under
the target while the job keeps up, and a batch takes what is there up to n*. Behind (more waiting than n*), the
batch grows, doubling from the last one, up to `max_rows`: larger batches amortise F and catch up fastest, and
the size falls back to n* once the backlog is read. Records never wait for a batch to fill: a batch takes what
there is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_ROWS = 100  # never plan batches smaller than this (a target below the fixed cost would stall the job)
FIT_SAMPLES = 4  # recent batches needed for a fit; fewer: the first batches take the cap as is


def fit_batch_cost(samples: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """(F seconds, c seconds per record) fitted to (records, seconds) of recent batches; None without enough.

    A least-squares line when the batches' sizes differ enough to tell F from c; otherwise F is the fastest
    batch's time and c what the slowest adds per record, which overstates c (batches stay smaller: safe)."""
    if len(samples) < FIT_SAMPLES:
        return None
    rows = np.array([max(0, n) for n, _ in samples], dtype=float)
    seconds = np.array([s for _, s in samples], dtype=float)
    if rows.max() >= 1.5 * max(rows.min(), 1.0):
        c, f = np.polyfit(rows, seconds, 1)
        if c > 0 and f >= 0:
            return float(f), float(c)
    fixed = float(seconds.min())
    per_row = float(max(((seconds - fixed) / np.maximum(rows, 1.0)).max(), 1e-7))
    return fixed, per_row


def target_rows(target_ms: int, cost: tuple[float, float]) -> int:
    """The most records a batch may take for delays under `target_ms`: (target/2 - F) / c, at least MIN_ROWS."""
    fixed, per_row = cost
    return max(MIN_ROWS, int((target_ms / 2000.0 - fixed) / per_row))


def next_batch_rows(
    target_ms: int,
    samples: Sequence[tuple[int, float]],
    waiting: int,
    max_rows: int | None,
) -> int | None:
    """The record limit of the next batch (None: no limit but `max_rows`), given the recent batches' (records,
    seconds), newest last, and the records `waiting` to be read."""
    cost = fit_batch_cost(samples)
    if cost is None:
        return max_rows
    limit = target_rows(target_ms, cost)
    if waiting > limit:  # behind: grow from the last batch to catch up
        limit = max(limit, 2 * (samples[-1][0] if samples else 0))
    return limit if max_rows is None else min(limit, max_rows)
