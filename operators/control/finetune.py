"""Paper 000's fine tuning (Fig. 4b): keep each group's state within [theta, 2 theta] by extendible hashing.

A partition whose state exceeds 2 theta gets a directory of 2^d entries (global depth d) indexed by the d low
mini bits of its tuples' hashes (partitioning.mini_bits); each bucket is a mini-group `Group(p, d', pattern)`
with local depth d' <= d, pointed to by the 2^(d - d') entries whose d' low bits equal its pattern. A bucket
above 2 theta splits in two on bit d' (the directory doubles first when d' = d); a bucket below theta merges
with its buddy (the bucket differing only in bit d' - 1) when the buddy has the same local depth and the two
hold less than 2 theta together, and, when given their slots, sit on the same slot. Mini-groups are units of the
routing table, so the reorganisation moves them like whole partitions.

Sizes come as a histogram over the low mini bits (`fine_sizes`; the join job reports FINE_DEPTH of them per
partition), so any bucket's size is a sum of bins and a split's outcome is known before it is made.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from windjoin.operators.partitioning import Group, RoutingTable, mini_bits, partition_of_hash

# Mini bits in the per-partition histograms of the job's load reports (operators.control.slot_load): 16 bins per
# partition keep reports small, and no directory splits deeper than the sizes it is judged by.
FINE_DEPTH = 4


@dataclass(frozen=True)
class Directory:
    """One partition's extendible-hash directory: entry i (the d low mini bits) -> its bucket."""

    partition: int
    global_depth: int
    entries: tuple[Group, ...]

    @staticmethod
    def whole(partition: int) -> Directory:
        return Directory(partition, 0, (Group(partition),))

    @staticmethod
    def of(partition: int, buckets: Iterable[Group]) -> Directory:
        """The smallest directory over buckets that tile the partition."""
        buckets = sorted(buckets)
        depth = max(b.depth for b in buckets)
        entries = []
        for i in range(1 << depth):
            holders = [b for b in buckets if i & ((1 << b.depth) - 1) == b.pattern]
            if len(holders) != 1 or holders[0].partition != partition:
                raise ValueError(f"buckets {buckets} do not tile partition {partition} (entry {i}: {holders})")
            entries.append(holders[0])
        return Directory(partition, depth, tuple(entries))

    def buckets(self) -> list[Group]:
        return sorted(set(self.entries))

    def bucket_of(self, bits: np.ndarray) -> list[Group]:
        """The bucket of each tuple, by its mini bits."""
        index = (np.asarray(bits, dtype=np.uint64) & np.uint64((1 << self.global_depth) - 1)).astype(np.int64)
        return [self.entries[i] for i in index.tolist()]

    def split(self, bucket: Group) -> Directory:
        """Split a bucket on its next bit, doubling the directory first when its local depth is the global one."""
        if bucket not in self.entries:
            raise ValueError(f"{bucket} is not a bucket of partition {self.partition}'s directory")
        entries, depth = list(self.entries), self.global_depth
        if bucket.depth == depth:
            entries, depth = entries + entries, depth + 1  # entry i + 2^d shares entry i's d low bits
        low = Group(bucket.partition, bucket.depth + 1, bucket.pattern)
        high = Group(bucket.partition, bucket.depth + 1, bucket.pattern | (1 << bucket.depth))
        for i, b in enumerate(entries):
            if b == bucket:
                entries[i] = high if i >> bucket.depth & 1 else low
        return Directory(self.partition, depth, tuple(entries))

    def buddy(self, bucket: Group) -> Group | None:
        """The bucket it can merge with: differing only in bit d' - 1, with the same local depth."""
        if bucket.depth == 0:
            return None
        other = Group(bucket.partition, bucket.depth, bucket.pattern ^ (1 << (bucket.depth - 1)))
        return other if other in self.entries else None

    def merge(self, bucket: Group) -> Directory:
        """Merge a bucket with its buddy; halve the directory while no bucket needs its top bit."""
        buddy = self.buddy(bucket)
        if buddy is None:
            raise ValueError(f"{bucket} has no buddy of the same local depth")
        parent = Group(bucket.partition, bucket.depth - 1, bucket.pattern & ((1 << (bucket.depth - 1)) - 1))
        entries = [parent if b in (bucket, buddy) else b for b in self.entries]
        depth = self.global_depth
        while depth > 0 and all(b.depth < depth for b in entries):
            depth -= 1
            entries = entries[: 1 << depth]
        return Directory(self.partition, depth, tuple(entries))


def fine_sizes(
    hashes: np.ndarray, partitions: int, partition: int, max_depth: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """State of one partition as a histogram over its tuples' `max_depth` low mini bits (count or weights)."""
    mine = partition_of_hash(hashes, partitions) == partition
    bins = (mini_bits(hashes[mine], partitions) & np.uint64((1 << max_depth) - 1)).astype(np.int64)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[mine]
    return np.bincount(bins, weights=w, minlength=1 << max_depth).astype(np.float64)


def bucket_size(bucket: Group, sizes: np.ndarray) -> float:
    """A bucket's share of a fine histogram: the bins whose d' low bits are its pattern."""
    return float(sizes[bucket.pattern :: 1 << bucket.depth].sum())


def retune(
    directory: Directory,
    sizes: np.ndarray,
    theta: float,
    slot_of: Mapping[Group, int] | None = None,
    max_depth: int | None = None,
) -> Directory:
    """Split buckets above 2 theta (down to `max_depth`, at most the histogram's depth), then merge buddies
    below theta."""
    depth = int(len(sizes)).bit_length() - 1
    if len(sizes) != 1 << depth:
        raise ValueError(f"the size histogram has {len(sizes)} bins; it needs a power of two")
    max_depth = depth if max_depth is None else min(max_depth, depth)
    changed = True
    while changed:
        changed = False
        for b in directory.buckets():
            if bucket_size(b, sizes) > 2 * theta and b.depth < max_depth:
                directory, changed = directory.split(b), True
                break
    changed = True
    while changed:
        changed = False
        for b in directory.buckets():
            buddy = directory.buddy(b)
            if buddy is None or bucket_size(b, sizes) >= theta:
                continue
            if bucket_size(b, sizes) + bucket_size(buddy, sizes) >= 2 * theta:
                continue
            if slot_of is not None and slot_of.get(b) != slot_of.get(buddy):
                continue
            directory, changed = directory.merge(b), True
            break
    return directory


def routing_with(routing: RoutingTable, directories: Iterable[Directory]) -> RoutingTable:
    """The next routing version with partitions re-cut as the directories say; a new bucket stays on the slot of
    the unit it came from (a split) or that its merged halves shared."""
    directories = list(directories)
    if not directories:
        return routing
    units = routing.groups()
    by_part = _by_partition(units)
    out = dict(units)
    for d in directories:
        old = by_part.get(d.partition, {})
        for g in old:
            del out[g]
        for bucket in d.buckets():
            slots = {s for g, s in old.items() if g.covers(bucket) or bucket.covers(g)}
            if len(slots) != 1:
                raise ValueError(f"{bucket} would gather state from slots {sorted(slots)}; move it together first")
            out[bucket] = slots.pop()
    if out == units:
        return routing
    return routing.with_units(out)


def _by_partition(units: Mapping[Group, int]) -> dict[int, dict[Group, int]]:
    """Units and their slots grouped by partition (one pass: tables may hold tens of thousands of partitions)."""
    out: dict[int, dict[Group, int]] = {}
    for g, s in units.items():
        out.setdefault(g.partition, {})[g] = s
    return out


def retune_routing(
    routing: RoutingTable,
    sizes: Mapping[int, np.ndarray],
    theta: float,
    max_depth: int,
    frozen: Collection[int] = (),
) -> RoutingTable:
    """The next routing with each partition of `sizes` (its fine histogram) re-cut by `retune`, buddies merging
    only on one slot. Spread partitions (spreads are whole-partition) and `frozen` ones (state in flight) keep
    their units."""
    by_part = _by_partition(routing.groups())
    skip = {p for p, _ in routing.spread} | set(frozen)
    directories = []
    for p, hist in sorted(sizes.items()):
        hist = np.asarray(hist, dtype=np.float64)
        if p in skip or p not in by_part or (Group(p) in by_part[p] and hist.sum() <= 2 * theta):
            continue  # a whole partition within 2 theta: nothing to split, nothing to merge
        current = Directory.of(p, by_part[p])
        directory = retune(current, hist, theta, by_part[p], max_depth)
        if directory != current:
            directories.append(directory)
    return routing_with(routing, directories)


def unit_weights(
    weights: Mapping[Group, float], routing: RoutingTable, sizes: Mapping[int, np.ndarray]
) -> dict[Group, float]:
    """Weights of the routing's units from per-partition weights (load reports are per partition): a mini-group
    gets its partition's weight times its share of the partition's window tuples (evenly by depth without a
    histogram)."""
    out = dict(weights)
    for g, _ in routing.split:
        hist = sizes.get(g.partition)
        total = float(np.sum(hist)) if hist is not None else 0.0
        share = bucket_size(g, np.asarray(hist)) / total if total > 0 else 2.0**-g.depth
        out[g] = weights.get(Group(g.partition), 0.0) * share
    return out
