"""Per-partition-group load of one slot's batch, as the columns the join job reports to the controller.

One report per slot and batch, columnar (one list per measure, aligned on `part`), so its size grows with the
slot's partitions, never with its tuples. Each partition the slot holds state for is reported, also when it
received nothing this batch (its state still counts). Measures:

- `tuples_in`: the partition's rows that entered the join (late ones included; refused rows have no partition);
- `outputs`: result pairs it produced, over all tasks;
- `window_tuples`, `state_bytes`: what its windows hold after the batch; bytes are the stored columns'
  (timestamp and declared fields: numeric columns exactly, strings by a sampled mean length), approximate;
- `seconds`: the wall time spent joining the partition (probing, building its result tables), measured when
  it has a join of its own, plus its share of the slot's other work (state reads and writes, expiry, output
  encoding and staging) apportioned by its rows in plus its output pairs (each is a row the slot stores or
  writes; evenly when there are none), so the groups' seconds add up to the slot's. A slot that joins all its
  partitions in one pass measures none per partition: all its time is shared that way;
- `cpu`: the same in CPU seconds of the slot's worker thread (not inflated by waiting for a core), adding up to
  the slot's `cpu_seconds`: the partition's join work, what the controller balances (`control.load`). A hot
  partition's output pairs weigh here, where tuples in alone would miss them;
- `fine`: its window tuples as a histogram over the FINE_DEPTH low mini bits of their key hash (a list of
  2^FINE_DEPTH counts), from which the controller's fine tuning knows each mini-group's size before splitting
  (control.finetune). Tuples of a stream without a key are all in partition 0 and never split: not counted;
- `fine_in`: its rows in this batch by the same bins: with `fine`, what a mini-group's share of the partition's
  work is (an arriving tuple probes the window tuples of its own key, so a bin's work grows with rows in times
  window tuples; control.finetune.unit_weights).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import key_hash, mini_bits
from windjoin.operators.window import Block

GROUP_FIELDS = ("part", "tuples_in", "outputs", "window_tuples", "state_bytes", "seconds", "cpu", "fine", "fine_in")
STRING_SAMPLE = 32  # string values sampled per block column for the mean length
POINTER_BYTES = 8  # an object column's reference per value


def block_bytes(block: Block) -> int:
    """Approximate bytes of a block's stored columns: numeric ones exactly, strings by a sampled mean length."""
    total = 0
    for column in block.tuples.columns.values():
        if column.dtype != object:
            total += column.nbytes
            continue
        n = len(column)
        if n == 0:
            continue
        sample = column[:: max(1, n // STRING_SAMPLE)][:STRING_SAMPLE]
        mean = sum(len(v) if isinstance(v, str | bytes) else POINTER_BYTES for v in sample) / len(sample)
        total += int(n * (POINTER_BYTES + mean))
    return total


def join_state(join: WindowJoin) -> tuple[int, int]:
    """(window tuples, approximate state bytes) of one partition's windows."""
    tuples = state = 0
    for store in join.stores.values():
        for block in store.blocks:
            tuples += len(block)
            state += block_bytes(block)
    return tuples, state


@dataclass(frozen=True)
class PartState:
    """What a partition's windows hold after a batch: tuples, approximate bytes, tuples by the FINE_DEPTH low mini
    bits of their key hash."""

    tuples: int
    bytes: int
    fine: np.ndarray


# Blocks are immutable and the job keeps its windows between batches, so each block is hashed once (a block
# belongs to one stream of one join, so its key field and partition count never change), not every batch.
_BLOCK_FINE: weakref.WeakKeyDictionary[Block, np.ndarray] = weakref.WeakKeyDictionary()
_BLOCK_PARTS: weakref.WeakKeyDictionary[Block, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = (
    weakref.WeakKeyDictionary()
)


def fine_bins(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Each key's FINE_DEPTH low mini bits (int64), the histogram bin it counts in."""
    return (mini_bits(key_hash(keys), partitions) & np.uint64((1 << FINE_DEPTH) - 1)).astype(np.int64)


def block_fine(block: Block, key: str, partitions: int) -> np.ndarray:
    """A block's tuples over the FINE_DEPTH low mini bits of their key's hash (int64 counts)."""
    if block not in _BLOCK_FINE:
        bins = fine_bins(block.tuples.columns[key], partitions)
        _BLOCK_FINE[block] = np.bincount(bins, minlength=1 << FINE_DEPTH)
    return _BLOCK_FINE[block]


def fine_histogram(join: WindowJoin) -> np.ndarray:
    """One partition's window tuples by the FINE_DEPTH low mini bits of their key hash, over its keyed streams."""
    out = np.zeros(1 << FINE_DEPTH, dtype=np.int64)
    for name, store in join.stores.items():
        key = join.spec.streams[name].key
        if key is not None:
            for block in store.blocks:
                out += block_fine(block, key, join.spec.partitions)
    return out


def partition_state(join: WindowJoin) -> PartState:
    """What one partition's own join holds."""
    tuples, state = join_state(join)
    return PartState(tuples, state, fine_histogram(join))


def block_parts(block: Block, part_field: str, key: str | None, partitions: int) -> tuple:
    """A block of several partitions' tuples (each one's partition in `part_field`): its partitions, their tuple
    counts, their tuples by mini bits (rows aligned on the partitions; zeros without a key) and the block's bytes."""
    if block not in _BLOCK_PARTS:
        parts, codes = np.unique(block.tuples.columns[part_field], return_inverse=True)
        counts = np.bincount(codes, minlength=len(parts))
        fine = np.zeros((len(parts), 1 << FINE_DEPTH), dtype=np.int64)
        if key is not None:
            np.add.at(fine, (codes, fine_bins(block.tuples.columns[key], partitions)), 1)
        _BLOCK_PARTS[block] = (parts, counts, fine, block_bytes(block))
    return _BLOCK_PARTS[block]


def pooled_state(join: WindowJoin, part_field: str) -> dict[int, PartState]:
    """What a join holding several partitions holds of each (a block's bytes shared by its tuples): its windows,
    and its as-of tasks' waiting tuples and versions."""
    parts, counts, fine, size = [], [], [], []
    held = [(name, block) for name, store in join.stores.items() for block in store.blocks]
    for task, state in join.asof.items():
        left, right = join.spec.task(task).join
        held += [(s, Block(t)) for s, t in ((left, state.waiting), (right, state.versions)) if len(t)]
    for name, block in held:
        p, n, bits, nbytes = block_parts(block, part_field, join.spec.streams[name].key, join.spec.partitions)
        parts.append(p)
        counts.append(n)
        fine.append(bits)
        size.append(n * (nbytes / len(block)))
    if not parts:
        return {}
    found, codes = np.unique(np.concatenate(parts), return_inverse=True)
    tuples = np.bincount(codes, weights=np.concatenate(counts), minlength=len(found)).astype(np.int64)
    state = np.bincount(codes, weights=np.concatenate(size), minlength=len(found)).astype(np.int64)
    by_bits = np.zeros((len(found), 1 << FINE_DEPTH), dtype=np.int64)
    np.add.at(by_bits, codes, np.concatenate(fine))
    return {
        p: PartState(n, b, bits)
        for p, n, b, bits in zip(found.tolist(), tuples.tolist(), state.tolist(), by_bits, strict=True)
    }


@dataclass
class GroupLoadMeter:
    """Collects one slot's per-partition measures during a batch, then reports them as columns."""

    tuples_in: dict[int, int] = field(default_factory=dict)
    outputs: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)
    fine_in: dict[int, np.ndarray] = field(default_factory=dict)

    def record(
        self,
        part: int,
        tuples_in: int,
        outputs: int,
        seconds: float,
        cpu: float = 0.0,
        fine_in: np.ndarray | None = None,
    ) -> None:
        self.tuples_in[part] = self.tuples_in.get(part, 0) + tuples_in
        self.outputs[part] = self.outputs.get(part, 0) + outputs
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds
        self.cpu[part] = self.cpu.get(part, 0.0) + cpu
        if fine_in is not None:
            self.fine_in[part] = self.fine_in.get(part, 0) + np.asarray(fine_in, dtype=np.int64)

    def report(self, held: Mapping[int, PartState], total_seconds: float, total_cpu: float = 0.0) -> dict[str, list]:
        """The columns GROUP_FIELDS over every partition measured or holding windows (`held`), by partition."""
        parts = sorted(set(held) | set(self.tuples_in))
        tuples_in = np.asarray([self.tuples_in.get(p, 0) for p in parts], dtype=np.int64)
        outputs = np.asarray([self.outputs.get(p, 0) for p in parts], dtype=np.int64)
        none = PartState(0, 0, np.zeros(1 << FINE_DEPTH, dtype=np.int64))
        states = [held.get(p, none) for p in parts]
        empty = [0] * (1 << FINE_DEPTH)
        rows = tuples_in + outputs  # what the slot's other work grows with: rows stored, pairs written
        return {
            "part": parts,
            "tuples_in": tuples_in.tolist(),
            "outputs": outputs.tolist(),
            "window_tuples": [h.tuples for h in states],
            "state_bytes": [h.bytes for h in states],
            "seconds": _with_remainder([self.seconds.get(p, 0.0) for p in parts], total_seconds, rows).tolist(),
            "cpu": _with_remainder([self.cpu.get(p, 0.0) for p in parts], total_cpu, rows).tolist(),
            "fine": [h.fine.tolist() for h in states],
            "fine_in": [self.fine_in[p].tolist() if p in self.fine_in else empty for p in parts],
        }


def _with_remainder(measured: list[float], total: float, rows: np.ndarray) -> np.ndarray:
    """Each partition's measured time plus its share of the slot's unmeasured rest, by its rows (evenly when
    there are none), so the partitions' times add up to the slot's."""
    times = np.asarray(measured, dtype=np.float64)
    if not len(times):
        return times
    rest = max(0.0, total - float(times.sum()))
    share = rows / rows.sum() if rows.sum() else np.full(len(times), 1.0 / len(times))
    return times + rest * share
