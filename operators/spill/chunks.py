"""Splitting a chunk of arrivals by a label per row (partition, slot), keeping each share's arrival order."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from windjoin.operators.batch import Arrivals


def split_by(
    chunk: Mapping[str, Arrivals], labels: Mapping[str, np.ndarray]
) -> dict[int, tuple[dict[str, Arrivals], dict[str, np.ndarray]]]:
    """Per label: its share of the chunk (arrival positions renumbered 0..m-1 in the same order) and, per
    stream, which rows of the chunk went there. Streams without labels are left out."""
    streams = [s for s in chunk if s in labels and len(chunk[s])]
    if not streams:
        return {}
    order = {s: np.asarray(chunk[s].order, dtype=np.int64) for s in streams}
    all_labels = np.concatenate([np.asarray(labels[s], dtype=np.int64) for s in streams])
    all_order = np.concatenate([order[s] for s in streams])
    by = np.lexsort((all_order, all_labels))  # by label, then arrival
    sorted_labels = all_labels[by]
    rank = np.empty(len(by), dtype=np.int64)
    rank[by] = np.arange(len(by)) - np.searchsorted(sorted_labels, sorted_labels, side="left")
    offsets = np.cumsum([0] + [len(chunk[s]) for s in streams])
    out: dict[int, tuple[dict[str, Arrivals], dict[str, np.ndarray]]] = {}
    for label in np.unique(all_labels).tolist():
        share: dict[str, Arrivals] = {}
        rows_of: dict[str, np.ndarray] = {}
        for i, s in enumerate(streams):
            rows = np.flatnonzero(labels[s] == label)
            if len(rows) == 0:
                continue
            a = chunk[s]
            share[s] = Arrivals(
                {name: np.asarray(col)[rows] for name, col in a.columns.items()},
                rank[offsets[i] : offsets[i + 1]][rows],
                a.arrival_ns[rows] if a.arrival_ns is not None else None,
            )
            rows_of[s] = rows
        out[label] = (share, rows_of)
    return out
