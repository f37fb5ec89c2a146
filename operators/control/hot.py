"""SplitJoin's remedy for a hot partition: spread it over k slots, storing each new tuple at exactly one of
them (chosen by the record's hash) and probing it at all k.

Every pair (r, s) of the group is then found exactly once: at the one slot storing the earlier of the two,
when the later one probes there. The store slot is a pure function of the record's `record_hash` (topic,
Kafka partition, offset), so a replayed batch stores every tuple where it did the first time. Only time
windows: a count window over a spread group would need the stream's global arrival numbers at every slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from windjoin.operators.partitioning import Group


@dataclass(frozen=True)
class Spread:
    group: Group
    slots: tuple[int, ...]  # probe at all of them; store each tuple at slots[store_turns(hash, k)]

    def __post_init__(self) -> None:
        if not self.slots or len(set(self.slots)) != len(self.slots):
            raise ValueError(f"a spread needs distinct slots, got {self.slots}")


def store_turns(hashes: np.ndarray, k: int) -> np.ndarray:
    """Which of a spread's k slots (by position) stores each record, from its `record_hash`: the low 32 bits
    decide, the top ones being the shedding's (control.shedding.shed_mask_of_hashes)."""
    return ((np.asarray(hashes, dtype=np.uint64) & np.uint64(0xFFFFFFFF)) % np.uint64(k)).astype(np.int64)


def plan_spread(group: Group, home: int, k: int, occupancy: Mapping[int, float]) -> Spread:
    """The group's home slot plus the k - 1 least occupied others (ties by slot number)."""
    others = sorted((s for s in occupancy if s != home), key=lambda s: (occupancy[s], s))
    if k - 1 > len(others):
        raise ValueError(f"cannot spread {group} over {k} slots: only {len(others) + 1} exist")
    return Spread(group, (home, *others[: k - 1]))
