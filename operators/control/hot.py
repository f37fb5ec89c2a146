"""SplitJoin's remedy for a hot partition: spread it over k slots, storing each new tuple at exactly one of
them (round-robin) and probing it at all k.

Every pair (r, s) of the group is then found exactly once: at the one slot storing the earlier of the two,
when the later one probes there. Store turns are a pure function of the tuple's arrival number within its
group and stream (`cursor` counts the arrivals before a batch, so a replayed batch that starts from the same
cursor stores every tuple where it did the first time). Only time windows: a count window over a spread group
would need the stream's global arrival numbers at every slot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from windjoin.operators.partitioning import Group


@dataclass(frozen=True)
class Spread:
    group: Group
    slots: tuple[int, ...]  # probe at all of them; store at slots[n mod k] for the n-th arrival of a stream

    def __post_init__(self) -> None:
        if not self.slots or len(set(self.slots)) != len(self.slots):
            raise ValueError(f"a spread needs distinct slots, got {self.slots}")

    @property
    def k(self) -> int:
        return len(self.slots)

    def store_slots(self, cursor: int, n: int) -> np.ndarray:
        """Where each of the next n arrivals of one stream (the cursor-th onwards) is stored."""
        return np.asarray(self.slots, dtype=np.int32)[(cursor + np.arange(n)) % self.k]

    def probe_slots(self) -> tuple[int, ...]:
        return self.slots


def spread_width(group_load: float, slot_capacity: float, target_occupancy: float, slots: int) -> int:
    """How many slots a group needs so each carries at most target_occupancy of its capacity (1: not hot).

    It assumes the group's work divides evenly over its k slots: each stores 1/k of its tuples and so meets a
    window k times smaller when probing; receiving every tuple at every slot is the part that does not shrink."""
    if slot_capacity <= 0 or not 0 < target_occupancy <= 1:
        raise ValueError(
            f"need slot_capacity > 0 and 0 < target_occupancy <= 1, got {slot_capacity}, {target_occupancy}"
        )
    return max(1, min(slots, math.ceil(group_load / (slot_capacity * target_occupancy))))


def plan_spread(group: Group, home: int, k: int, occupancy: Mapping[int, float]) -> Spread:
    """The group's home slot plus the k - 1 least occupied others (ties by slot number)."""
    others = sorted((s for s in occupancy if s != home), key=lambda s: (occupancy[s], s))
    if k - 1 > len(others):
        raise ValueError(f"cannot spread {group} over {k} slots: only {len(others) + 1} exist")
    return Spread(group, (home, *others[: k - 1]))
