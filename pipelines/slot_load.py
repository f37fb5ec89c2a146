"""Per-partition-group load of one slot's batch, as the columns the join job reports to the controller.

One report per slot and batch, columnar (one list per measure, aligned on `part`), so its size grows with the
slot's partitions, never with its tuples. Each partition the slot holds state for is reported, also when it
received nothing this batch (its state still counts). Measures:

- `tuples_in`: the partition's rows that entered the join (late ones included; refused rows have no partition);
- `outputs`: result pairs it produced, over all tasks;
- `window_tuples`, `state_bytes`: what its windows hold after the batch; bytes are the stored columns'
  (timestamp and declared fields: numeric columns exactly, strings by a sampled mean length), approximate;
- `seconds`: the time spent joining the partition, measured, plus its share of the slot's other work (state
  reads and writes, expiry, output encoding) apportioned by tuples in (evenly when nothing arrived), so the
  groups' seconds add up to the slot's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from windjoin.operators.join import WindowJoin
from windjoin.operators.window import Block

GROUP_FIELDS = ("part", "tuples_in", "outputs", "window_tuples", "state_bytes", "seconds")
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


@dataclass
class GroupLoadMeter:
    """Collects one slot's per-partition measures during a batch, then reports them as columns."""

    tuples_in: dict[int, int] = field(default_factory=dict)
    outputs: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)

    def record(self, part: int, tuples_in: int, outputs: int, seconds: float) -> None:
        self.tuples_in[part] = self.tuples_in.get(part, 0) + tuples_in
        self.outputs[part] = self.outputs.get(part, 0) + outputs
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds

    def report(self, joins: Mapping[int, WindowJoin], total_seconds: float) -> dict[str, list]:
        """The columns GROUP_FIELDS over every partition measured or holding windows, by partition number."""
        parts = np.asarray(sorted(set(joins) | set(self.tuples_in)), dtype=np.int64)
        tuples_in = np.asarray([self.tuples_in.get(p, 0) for p in parts.tolist()], dtype=np.int64)
        outputs = np.asarray([self.outputs.get(p, 0) for p in parts.tolist()], dtype=np.int64)
        measured = np.asarray([self.seconds.get(p, 0.0) for p in parts.tolist()], dtype=np.float64)
        held = np.asarray([join_state(joins[p]) if p in joins else (0, 0) for p in parts.tolist()], dtype=np.int64)
        held = held.reshape(len(parts), 2)
        rest = max(0.0, total_seconds - float(measured.sum()))
        if len(parts):
            share = tuples_in / tuples_in.sum() if tuples_in.sum() else np.full(len(parts), 1.0 / len(parts))
            seconds = measured + rest * share
        else:
            seconds = measured
        return {
            "part": parts.tolist(),
            "tuples_in": tuples_in.tolist(),
            "outputs": outputs.tolist(),
            "window_tuples": held[:, 0].tolist(),
            "state_bytes": held[:, 1].tolist(),
            "seconds": seconds.tolist(),
        }
