"""Hash partitions of the join key and the routing table that places partitions on slots.

A tuple's partition is H(key) mod n_partitions with a hash that is stable across processes and machines
(pandas' keyed SipHash), and equal for equal keys across types: ints and floats hash by numeric value, so
`5` and `5.0` meet. Partitions are the unit the controller moves between slots; the routing table's
version travels with the data (control epoch), so a replayed batch routes exactly as the first time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    """The hash partition (int32) of each key value."""
    if keys.dtype.kind in "iuf":
        keys = keys.astype(np.float64) + 0.0  # numeric value decides; +0.0 folds -0.0 into 0.0
    elif keys.dtype.kind == "b":
        keys = keys.astype(np.float64)
    elif keys.dtype.kind == "U":
        keys = keys.astype(object)
    hashed = pd.util.hash_array(np.asarray(keys), categorize=False)
    return (hashed % np.uint64(partitions)).astype(np.int32)


@dataclass(frozen=True)
class RoutingTable:
    """Which slot owns each partition, in one version of the control epoch."""

    version: int
    slot_of: tuple[int, ...]  # partition -> slot index

    @staticmethod
    def round_robin(partitions: int, slots: int, version: int = 0) -> RoutingTable:
        return RoutingTable(version, tuple(p % slots for p in range(partitions)))

    def slots(self, partitions: np.ndarray) -> np.ndarray:
        return np.asarray(self.slot_of, dtype=np.int32)[partitions]
