"""A stream's sliding window as immutable blocks in arrival order: expired whole, compacted like a binary counter.

Expiry never scans tuples: a block goes when its newest tuple has left the window (zone maps on ts and
sseq). A block may still hold some expired tuples; probes filter them exactly, so results never depend on
when a block is dropped. Adjacent blocks merge when the older is no larger than the newer, so a window
of n tuples fed in batches of b holds O(n / cap + log(cap / b)) blocks; the cap bounds both the size of
an index rebuild and the share of expired-but-kept tuples.
"""

from __future__ import annotations

import numpy as np

from windjoin.operators.batch import TupleBatch
from windjoin.operators.index import BlockIndex, IndexPlan, WindowOrder, choose_plan
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.system_columns import SEQ, SSEQ, TS, WSTART
from windjoin.operators.windows import WindowKind

MAX_BLOCK_ROWS = 1 << 18
PAIRED, CLOSED = "paired", "closed"  # the flags of `Block.flag`


class Block:
    """Immutable tuples of one stream, contiguous in arrival order, with zone maps and lazily built indexes, and the
    flags outer, semi and anti tasks keep per tuple (`flag`)."""

    def __init__(self, tuples: TupleBatch, flags: dict[tuple[str, str], np.ndarray] | None = None) -> None:
        self.tuples = tuples
        zoned = (SEQ, SSEQ, TS, WSTART) if WSTART in tuples.columns else (SEQ, SSEQ, TS)
        self.zone = {name: (int(self.column(name).min()), int(self.column(name).max())) for name in zoned}
        self._plans: dict[tuple[tuple[ProbePredicate, ...], WindowOrder | None], IndexPlan | None] = {}
        self._indexes: dict[tuple[object, ...], BlockIndex] = {}
        self.flags = {} if flags is None else flags

    def flag(self, task: str, kind: str) -> np.ndarray:
        """Task `task`'s `kind` flag of every tuple (PAIRED: it has paired; CLOSED: it can pair no more and was
        dealt with), all False until set; the array is the block's own, set in place."""
        if (task, kind) not in self.flags:
            self.flags[task, kind] = np.zeros(len(self), dtype=bool)
        return self.flags[task, kind]

    def take(self, rows: np.ndarray) -> Block:
        """A block of some of these tuples, flags kept."""
        return Block(self.tuples.take(rows), {key: flags[rows] for key, flags in self.flags.items()})

    @staticmethod
    def merge(older: Block, newer: Block) -> Block:
        keys = set(older.flags) | set(newer.flags)
        flags = {key: np.concatenate([older.flag(*key), newer.flag(*key)]) for key in keys}
        return Block(TupleBatch.concat([older.tuples, newer.tuples]), flags)

    def __len__(self) -> int:
        return len(self.tuples)

    def column(self, name: str) -> np.ndarray:
        if name == SEQ:
            return self.tuples.seq
        if name == SSEQ:
            return self.tuples.sseq
        if name == TS:
            return self.tuples.ts
        return self.tuples.columns[name]

    def index_for(
        self, preds: tuple[ProbePredicate, ...], window: WindowOrder | None = None
    ) -> tuple[IndexPlan, BlockIndex] | None:
        """The plan for these predicates (and this window) on this block and its index (None: nested loop);
        equal keys share."""
        if (preds, window) not in self._plans:
            self._plans[preds, window] = choose_plan(list(preds), dict(self.tuples.columns), window)
        plan = self._plans[preds, window]
        if plan is None:
            return None
        if plan.key not in self._indexes:
            columns = dict(self.tuples.columns)
            if plan.window is not None:
                columns[plan.window] = self.column(plan.window)
            self._indexes[plan.key] = BlockIndex(plan, columns)
        return plan, self._indexes[plan.key]


class WindowStore:
    """The stored window of one stream, shared by every task that joins the stream."""

    def __init__(
        self,
        window: WindowKind,
        max_block_rows: int = MAX_BLOCK_ROWS,
        lateness_ms: int = 0,
        history_ms: int | None = None,
    ) -> None:
        """`history_ms` (event-time windows, required): how far below the watermark a stored tuple may still pair with a
        later one (`JoinSpec.history_ms`)."""
        self.window = window
        if window.counts_arrivals:
            self.max_block_rows = max(1024, min(max_block_rows, window.size // 8))
            self.max_block_span_ms = None
        else:
            if history_ms is None:
                raise ValueError(
                    "history_ms: an event-time window's store needs it (JoinSpec.history_ms of its stream)"
                )
            self.history_ms = history_ms
            self.max_block_rows = max_block_rows
            # A block expires whole, so its span is how long a stale tuple may outlive expiry: an eighth of the
            # history; one of zero holds only the tuples within the lateness, so an eighth of that.
            self.max_block_span_ms = max(1, (self.history_ms or lateness_ms) // 8)
        self.blocks: list[Block] = []
        self.count = 0  # tuples ever stored: the next tuple's sseq

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def append(self, tuples: TupleBatch) -> None:
        if len(tuples) == 0:
            return
        self.blocks.append(Block(tuples))
        self.count += len(tuples)
        while len(self.blocks) >= 2 and self._should_merge(self.blocks[-2], self.blocks[-1]):
            newer = self.blocks.pop()
            older = self.blocks.pop()
            self.blocks.append(Block.merge(older, newer))

    def _should_merge(self, older: Block, newer: Block) -> bool:
        if len(older) > len(newer) or len(older) + len(newer) > self.max_block_rows:
            return False
        if self.max_block_span_ms is None:
            return True
        lo = min(older.zone[TS][0], newer.zone[TS][0])
        hi = max(older.zone[TS][1], newer.zone[TS][1])
        return hi - lo <= self.max_block_span_ms

    def drop_where(self, column: str, value: int) -> None:
        """Remove the tuples whose `column` equals `value` (a partition leaving a window that pools several):
        the blocks holding some are replaced by blocks of the rest, in the same order."""
        blocks = []
        for block in self.blocks:
            keep = block.tuples.columns[column] != value
            if keep.all():
                blocks.append(block)
            elif keep.any():
                blocks.append(block.take(np.flatnonzero(keep)))
        self.blocks = blocks

    def locate(self, sseq: np.ndarray) -> list[tuple[Block, np.ndarray, np.ndarray]]:
        """Where the stored tuples numbered `sseq` (per stream) sit: (block, rows in it, positions in `sseq`) for
        each block holding some. Blocks hold ascending numbers; a number not stored is left out."""
        if not self.blocks or not len(sseq):
            return []
        starts = np.array([b.tuples.sseq[0] for b in self.blocks])
        which = np.searchsorted(starts, sseq, side="right") - 1
        out = []
        for b in np.unique(which[which >= 0]).tolist():
            positions = np.flatnonzero(which == b)
            numbers = self.blocks[b].tuples.sseq
            rows = np.minimum(np.searchsorted(numbers, sseq[positions]), len(numbers) - 1)
            found = numbers[rows] == sseq[positions]
            out.append((self.blocks[b], rows[found], positions[found]))
        return out

    def seq_of(self, sseq: np.ndarray) -> np.ndarray:
        """The global arrival number of the stored tuples numbered `sseq` (the int64 maximum for a number not
        stored: one not arrived yet)."""
        out = np.full(len(sseq), np.iinfo(np.int64).max)
        for block, rows, positions in self.locate(sseq):
            out[positions] = block.tuples.seq[rows]
        return out

    def count_before(self, seq: np.ndarray) -> np.ndarray:
        """How many of this stream's tuples arrived before each global arrival number `seq` (of another stream):
        the number of the first stored tuple after it, or every tuple if none is stored after it."""
        out = np.full(len(seq), self.count, dtype=np.int64)
        if not self.blocks:
            return out
        highs = np.array([b.zone[SEQ][1] for b in self.blocks])
        which = np.searchsorted(highs, seq, side="right")  # the first block holding a tuple after each
        for b in np.unique(which[which < len(self.blocks)]).tolist():
            positions = np.flatnonzero(which == b)
            tuples = self.blocks[b].tuples
            out[positions] = tuples.sseq[np.searchsorted(tuples.seq, seq[positions], side="right")]
        return out

    def keep_from(self, sseq: int) -> None:
        """Drop the blocks wholly below arrival number `sseq` (a count window's oldest tuple still needed)."""
        self.blocks = [b for b in self.blocks if b.zone[SSEQ][1] >= sseq]

    def expire(self, watermark_ms: int | None) -> None:
        """Drop blocks no future tuple can join: by count, or (time) wholly older than watermark - history."""
        if self.window.counts_arrivals:
            self.keep_from(self.count - self.window.size)
        elif watermark_ms is not None:
            oldest_needed = watermark_ms - self.history_ms
            self.blocks = [b for b in self.blocks if b.zone[TS][1] >= oldest_needed]
