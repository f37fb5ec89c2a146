"""Which tuples of a chunk are late against the running maximum event time, judged in arrival order.

One rule for the join (`WindowJoin` without a caller's watermark) and for a caller that judges lateness before
splitting a chunk between joins (join-file on several workers): they must agree tuple for tuple.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from windjoin.operators.batch import Arrivals


def in_arrival_order(chunk: Mapping[str, Arrivals], ts_fields: Mapping[str, str]) -> tuple[np.ndarray, ...]:
    """The chunk's event times in arrival order, with each one's stream (its index in `chunk`) and row."""
    streams = list(chunk)
    order = np.concatenate([np.asarray(chunk[s].order, dtype=np.int64) for s in streams])
    ts = np.concatenate([chunk[s].columns[ts_fields[s]] for s in streams]).astype(np.int64)
    owner = np.repeat(np.arange(len(streams)), [len(chunk[s]) for s in streams])
    row = np.concatenate([np.arange(len(chunk[s])) for s in streams])
    by_arrival = np.argsort(order, kind="stable")
    return ts[by_arrival], owner[by_arrival], row[by_arrival]


def running_max_late(ts: np.ndarray, max_ts: int | None, lateness_ms: int) -> tuple[np.ndarray, int | None]:
    """Which of `ts` (event times in arrival order) are over `lateness_ms` behind the largest event time before
    them (`max_ts` before the first, None: none yet), and the largest after them all."""
    if len(ts) == 0:
        return np.zeros(0, dtype=bool), max_ts
    start = max_ts if max_ts is not None else ts[0]
    running = np.maximum.accumulate(np.concatenate([[start], ts]))
    return ts < running[:-1] - lateness_ms, int(running[-1])
