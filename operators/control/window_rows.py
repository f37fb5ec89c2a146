"""Taking a group's stored tuples out of a WindowJoin: the state a move or a mini-group re-cut carries along."""

from __future__ import annotations

import numpy as np

from windjoin.operators.join import WindowJoin
from windjoin.operators.window import Block


def take_rows(join: WindowJoin, stream: str, select) -> dict[str, np.ndarray]:
    """Remove the stored tuples of `stream` for which select(columns) is True; return them in arrival order."""
    store = join.stores[stream]
    taken, kept = [], []
    for block in store.blocks:
        mask = select(block.tuples.columns)
        if mask.any():
            taken.append(block.tuples.take(np.flatnonzero(mask)))
        if not mask.all():
            kept.append(Block(block.tuples.take(np.flatnonzero(~mask))))
    store.blocks = kept
    names = list(join.spec.streams[stream].fields) + [join.spec.streams[stream].timestamp]
    if not taken:
        return {n: np.zeros(0, dtype=np.int64) for n in names}
    return {n: np.concatenate([t.columns[n] for t in taken]) for n in names}
