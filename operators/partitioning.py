"""Hash partitions of the join key and the routing table that places partitions on slots.

A tuple's partition is H(key) mod n_partitions with a hash that is stable across processes and machines
(pandas' keyed SipHash), and equal for equal keys across types: ints and floats hash by numeric value, so
`5` and `5.0` meet. Partitions are the unit the controller moves between slots; the routing table's
version travels with the data (control epoch), so a replayed batch routes exactly as the first time.

A partition may be split into mini-groups (paper 000's fine tuning by extendible hashing): a mini-group
`Group(p, depth, pattern)` holds the tuples of partition p whose `depth` low bits of H(key) // n_partitions
equal `pattern`. Those bits are independent of the partition number, so a tuple's mini-group is a function
of its hash alone and partition_of is unchanged by any split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd


def key_hash(keys: np.ndarray) -> np.ndarray:
    """The stable 64-bit hash (uint64) of each key value; partition and mini-group both derive from it."""
    if keys.dtype.kind in "iuf":
        keys = keys.astype(np.float64) + 0.0  # numeric value decides; +0.0 folds -0.0 into 0.0
    elif keys.dtype.kind == "b":
        keys = keys.astype(np.float64)
    elif keys.dtype.kind == "U":
        keys = keys.astype(object)
    return pd.util.hash_array(np.asarray(keys), categorize=False)


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    """The hash partition (int32) of each key value."""
    return partition_of_hash(key_hash(keys), partitions)


def partition_of_hash(hashes: np.ndarray, partitions: int) -> np.ndarray:
    return (hashes % np.uint64(partitions)).astype(np.int32)


def mini_bits(hashes: np.ndarray, partitions: int) -> np.ndarray:
    """The hash bits that choose a mini-group inside a partition (uint64): H // n_partitions."""
    return hashes // np.uint64(partitions)


@dataclass(frozen=True, order=True)
class Group:
    """A movable unit: a whole partition (depth 0) or one of its mini-groups (low `depth` mini bits = pattern)."""

    partition: int
    depth: int = 0
    pattern: int = 0

    def __post_init__(self) -> None:
        if self.depth < 0 or not 0 <= self.pattern < (1 << self.depth):
            raise ValueError(f"mini-group pattern {self.pattern} does not fit in depth {self.depth}")

    def to_json(self) -> list[int]:
        """The group as JSON, [partition, depth, pattern]: the one form decisions, routing tables and slot
        metadata carry (`from_json` reads it back)."""
        return [self.partition, self.depth, self.pattern]

    @staticmethod
    def from_json(values: Sequence[int]) -> Group:
        partition, depth, pattern = values
        return Group(int(partition), int(depth), int(pattern))

    @property
    def key(self) -> str:
        """The group as text, "partition" or "partition.depth.pattern": the one form of keys, file names and
        logs (`from_key` reads it back)."""
        return str(self.partition) if self.depth == 0 else f"{self.partition}.{self.depth}.{self.pattern}"

    @staticmethod
    def from_key(key: str) -> Group:
        return Group(*(int(n) for n in key.split(".")))

    def contains(self, partitions: np.ndarray, bits: np.ndarray) -> np.ndarray:
        """Which tuples (by partition and mini bits) belong to this group."""
        mask = np.uint64((1 << self.depth) - 1)
        return (partitions == self.partition) & ((bits & mask) == np.uint64(self.pattern))

    def covers(self, other: Group) -> bool:
        """Whether every tuple of `other` belongs to this group."""
        return (
            other.partition == self.partition
            and other.depth >= self.depth
            and other.pattern & ((1 << self.depth) - 1) == self.pattern
        )


def _span(group: Group, deepest: int) -> tuple[int, int]:
    """A group's interval of [0, 1) in units of 2^-deepest: its pattern's bits reversed, and its length."""
    start = int(format(group.pattern, f"0{group.depth}b")[::-1], 2) if group.depth else 0
    return start << (deepest - group.depth), 1 << (deepest - group.depth)


@dataclass(frozen=True)
class RoutingTable:
    """Which slot owns each partition, in one version of the control epoch.

    `split` lists, for partitions split into mini-groups, the slot of each mini-group; those partitions'
    entries in `slot_of` are then unused. The mini-groups of a split partition cover its hashes exactly once.
    """

    version: int
    slot_of: tuple[int, ...]  # partition -> slot index
    split: tuple[tuple[Group, int], ...] = ()  # (mini-group, slot), sorted
    # (partition, slots) of hot partitions spread SplitJoin-style: each tuple stored at one slot, probed at all;
    # slots[0] is the partition's slot in `slot_of`
    spread: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        for part, slots in self.spread:
            if len(slots) < 2 or len(set(slots)) != len(slots) or slots[0] != self.slot_of[part]:
                raise ValueError(
                    f"spread of partition {part} over {slots}: needs 2+ distinct slots, the first being its slot "
                    f"{self.slot_of[part]}"
                )

    def to_json(self) -> dict[str, Any]:
        """The table as plain JSON values (batch offsets and controller decisions carry it so)."""
        return {
            "version": self.version,
            "slot_of": list(self.slot_of),
            "split": [[*g.to_json(), slot] for g, slot in self.split],
            "spread": [[p, list(slots)] for p, slots in self.spread],
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RoutingTable:
        split = tuple((Group.from_json(group), int(slot)) for *group, slot in data.get("split", []))
        spread = tuple((int(p), tuple(int(s) for s in slots)) for p, slots in data.get("spread", []))
        return RoutingTable(int(data["version"]), tuple(int(s) for s in data["slot_of"]), split, spread)

    @staticmethod
    def round_robin(partitions: int, slots: int, version: int = 0) -> RoutingTable:
        return RoutingTable(version, tuple(p % slots for p in range(partitions)))

    def slots(self, partitions: np.ndarray) -> np.ndarray:
        """Slot of each partition; for a split partition, the slot of its first mini-group (use `route`)."""
        table = np.asarray(self.slot_of, dtype=np.int32).copy()
        for group, slot in reversed(self.split):
            table[group.partition] = slot
        return table[partitions]

    @property
    def partitions(self) -> int:
        return len(self.slot_of)

    def route(self, hashes: np.ndarray) -> np.ndarray:
        """Slot of each tuple by its key hash, mini-groups included."""
        parts = partition_of_hash(hashes, self.partitions)
        out = np.asarray(self.slot_of, dtype=np.int32)[parts]
        if self.split:
            offset, mask, directory = self._directories
            rows = np.flatnonzero(offset[parts] >= 0)
            bits = mini_bits(hashes[rows], self.partitions) & mask[parts[rows]]
            out[rows] = directory[offset[parts[rows]] + bits.astype(np.int64)]
        return out

    @cached_property
    def _directories(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The split partitions' directories side by side, so routing is one lookup per tuple whatever the
        number of mini-groups: per partition its first entry (-1: not split) and mini-bit mask, and per entry
        (the partition's deepest mini-group's bits) the slot."""
        depth: dict[int, int] = {}
        for group, _ in self.split:
            depth[group.partition] = max(depth.get(group.partition, 0), group.depth)
        offset = np.full(self.partitions, -1, dtype=np.int64)
        mask = np.zeros(self.partitions, dtype=np.uint64)
        start = 0
        for part, d in sorted(depth.items()):
            offset[part], mask[part] = start, (1 << d) - 1
            start += 1 << d
        directory = np.empty(start, dtype=np.int32)
        for group, slot in self.split:
            stride = 1 << group.depth
            first = offset[group.partition] + group.pattern
            directory[first : offset[group.partition] + (1 << depth[group.partition]) : stride] = slot
        return offset, mask, directory

    def groups(self) -> dict[Group, int]:
        """Every movable unit and its slot: unsplit partitions as depth-0 groups, split ones as mini-groups."""
        split_parts = {g.partition for g, _ in self.split}
        out = {Group(p): s for p, s in enumerate(self.slot_of) if p not in split_parts}
        out.update(dict(self.split))
        return out

    def holders(self, partition: int) -> tuple[int, ...]:
        """The slots holding a partition's state: its slot, or every slot of its spread (home first)."""
        for part, slots in self.spread:
            if part == partition:
                return slots
        return (self.slot_of[partition],)

    def with_spread(self, partition: int, slots: tuple[int, ...]) -> RoutingTable:
        """The next version with `partition` spread over `slots` (its own slot first), or unspread with one slot."""
        spread = tuple(sorted((p, s) for p, s in self.spread if p != partition))
        slot_of = list(self.slot_of)
        slot_of[partition] = slots[0]
        if len(slots) > 1:
            spread = tuple(sorted((*spread, (partition, tuple(slots)))))
        return RoutingTable(self.version + 1, tuple(slot_of), self.split, spread)

    def slot_of_group(self, group: Group) -> int:
        return self.groups()[group]

    def with_moves(self, moves: Mapping[Group, int]) -> RoutingTable:
        """The next version with each group placed on its new slot (the groups must be units of this table)."""
        units = self.groups()
        unknown = [g for g in moves if g not in units]
        if unknown:
            raise ValueError(f"cannot move {unknown}: not units of routing version {self.version}")
        units.update(moves)
        return self._from_units(self.version + 1, units)

    def with_units(self, units: Mapping[Group, int]) -> RoutingTable:
        """The next version with a new set of units (after mini-groups split or merged); they must tile every
        partition exactly once."""
        return self._from_units(self.version + 1, dict(units))

    def _from_units(self, version: int, units: dict[Group, int]) -> RoutingTable:
        slot_of = list(self.slot_of)
        split = []
        for group, slot in sorted(units.items()):
            if group.depth == 0:
                slot_of[group.partition] = slot
            else:
                split.append((group, slot))
        # A spread partition whose slot moves is no longer spread (it moves whole, with every stored share).
        spread = tuple((p, slots) for p, slots in self.spread if slot_of[p] == self.slot_of[p])
        table = RoutingTable(version, tuple(slot_of), tuple(split), spread)
        table.check_tiling(set(units))
        return table

    def check_tiling(self, units: set[Group]) -> None:
        """Raise unless the units cover each partition's hashes exactly once.

        A unit's mini bits read backwards (lowest first) are a binary fraction: the unit is the interval of
        [0, 1) of length 2^-depth starting there. The units tile a partition exactly when, sorted, each starts
        where the one before ended and the last ends at 1: a sort and a sweep, not a test of every pair."""
        by_part: dict[int, list[Group]] = {}
        for g in units:
            if not 0 <= g.partition < self.partitions:
                raise ValueError(f"{g} is outside partitions 0..{self.partitions - 1}")
            by_part.setdefault(g.partition, []).append(g)
        for p in range(self.partitions):
            groups = by_part.get(p, [])
            deepest = max((g.depth for g in groups), default=0)
            end = 0  # in units of 2^-deepest; -1 once a gap or an overlap is seen
            for start, length in sorted(_span(g, deepest) for g in groups):
                end = end + length if start == end else -1
            if end != 1 << deepest:
                shown = ", ".join(str(g) for g in sorted(groups)[:8]) + (", ..." if len(groups) > 8 else "")
                raise ValueError(f"partition {p} is not tiled exactly once by its {len(groups)} groups [{shown}]")

    def moves_from(self, older: RoutingTable) -> dict[Group, tuple[int, int]]:
        """Groups of this version whose tuples an older version sent elsewhere: group -> (old slot, new slot).

        A mini-group of a partition split since `older` reports the slot its tuples had there."""
        by_part: dict[int, list[tuple[Group, int]]] = {}
        for g, s in older.groups().items():
            by_part.setdefault(g.partition, []).append((g, s))
        out = {}
        for group, slot in self.groups().items():
            sources = {s for g, s in by_part.get(group.partition, []) if g.covers(group) or group.covers(g)}
            if sources != {slot}:
                if len(sources) != 1:
                    raise ValueError(f"{group} gathers tuples from several old slots {sorted(sources)}")
                out[group] = (sources.pop(), slot)
        return out
