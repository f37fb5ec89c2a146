"""What outer, semi and anti tasks remember of their tuples, and the rows they emit alone.

An inner task forgets a pair once it is emitted. A task of another type (`TaskSpec.type`) remembers, for each
tuple of its tracked streams (`TaskSpec.tracked`), whether it has paired, and emits one side alone:
- semi: a left tuple at its first pair (in the pair's place in the emission order);
- left, right, full, anti: a tuple that never paired (the other side null), once it can pair no more.
The flags sit on the window's blocks (`Block.flag`), so they merge, move and expire with the tuples they describe.

When a tuple can pair no more: a partner arriving later has an event time at or above the watermark (older ones
are refused as late), so a first-stream tuple is closed once the watermark passes its time plus the task's
`upper`, a second-stream tuple once it passes its time less `lower` (see `TimeWindow.bounds`); with a count
window, once `size` newer tuples of its own stream have arrived. An unpaired row's result time is its own
tuple's event time: the row is about that tuple (Spark's and Flink's outer joins keep the row's own time too),
and a query over a span of event time finds it where its tuple lies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from windjoin.operators.batch import TupleBatch
from windjoin.operators.kernel import Probe, RangeFilter, probe_block
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.window import CLOSED, PAIRED, Block, WindowStore


@dataclass(frozen=True)
class Lone:
    """One task's tuples of one stream emitted alone (the task's other stream null), in emission order."""

    task: str
    join: tuple[str, ...]  # the task's streams, in its `join` order
    stream: str
    columns: dict[str, np.ndarray]
    seq: np.ndarray  # each tuple's arrival number
    after: np.ndarray  # the arrival after which each row is emitted (its place among the chunk's pairs)
    at_close: bool  # emitted as its tuples could pair no more (after the chunk's pairs), not at a first pair
    windows: tuple[np.ndarray, np.ndarray] | None = None  # each row's (window_start, window_end): tumbling, hopping

    def __len__(self) -> int:
        return len(self.seq)


def flags_of(store: WindowStore, task: str, kind: str, sseq: np.ndarray) -> np.ndarray:
    """The `kind` flag of the stored tuples numbered `sseq` (False for a number not stored)."""
    out = np.zeros(len(sseq), dtype=bool)
    for block, rows, positions in store.locate(sseq):
        out[positions] = block.flag(task, kind)[rows]
    return out


def mark_paired(store: WindowStore, task: str, sseq: np.ndarray) -> None:
    """Remember that the stored tuples numbered `sseq` have paired (for `task`)."""
    for block, rows, _ in store.locate(sseq):
        block.flag(task, PAIRED)[rows] = True


def first_pairs(task: str, join: tuple[str, ...], store: WindowStore, side: TupleBatch, later: np.ndarray) -> Lone:
    """Semi: the left tuples of a chunk's pairs (`side`, in emission order, `later` each pair's later arrival)
    that pair for the first time, each once, in the place of its first pair; they are marked paired."""
    numbers = side.sseq
    first = np.zeros(len(numbers), dtype=bool)
    first[np.unique(numbers, return_index=True)[1]] = True
    fresh = np.flatnonzero(first & ~flags_of(store, task, PAIRED, numbers))
    mark_paired(store, task, numbers[fresh])
    chosen = side.take(fresh)
    return Lone(task, join, join[0], dict(chosen.columns), chosen.seq, later[fresh], at_close=False)


def recall_paired(
    task: str,
    store: WindowStore,
    partners: WindowStore,
    preds: tuple[ProbePredicate, ...],
    windows: Callable[[Block], list[tuple[RangeFilter, ...]]],
    use_index: bool = True,
) -> None:
    """Mark paired the stored tuples of `store` that some tuple of `partners` pairs with: the predicates oriented
    from `store`'s stream, the partner inside one of the ranges `windows` gives for a block's tuples (any one
    suffices: a time window's bounds, or a count window's earlier and later partners)."""
    for block in store.blocks:
        paired = block.flag(task, PAIRED)
        for filters in windows(block):
            probe = Probe(dict(block.tuples.columns), filters, preds, use_index)
            for other in partners.blocks:
                paired[probe_block(probe, other).probe_rows] = True


def below(column: str, limit: float) -> Callable[[Block], np.ndarray | None]:
    """A closing test: the tuples whose `column` (TS, or SSEQ for count windows) lies below `limit`; None for a
    block with none (its zone map says so)."""

    def test(block: Block) -> np.ndarray | None:
        return None if block.zone[column][0] >= limit else block.column(column) < limit

    return test


def close(
    task: str,
    join: tuple[str, ...],
    stream: str,
    store: WindowStore,
    closing: Callable[[Block], np.ndarray | None],
    after: int,
) -> Lone | None:
    """Mark the stored tuples of `stream` that `closing` says can pair no more; those that never paired are
    returned, to be emitted after arrival `after`."""
    taken = []
    for block in store.blocks:
        now = closing(block)
        if now is None:
            continue
        closed = block.flag(task, CLOSED)
        new = now & ~closed
        closed |= new
        rows = np.flatnonzero(new & ~block.flag(task, PAIRED))
        if len(rows):
            taken.append(block.tuples.take(rows))
    if not taken:
        return None
    tuples = TupleBatch.concat(taken)
    after_all = np.full(len(tuples), after, dtype=np.int64)
    return Lone(task, join, stream, dict(tuples.columns), tuples.seq, after_all, at_close=True)
