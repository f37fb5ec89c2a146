"""Per-partition-group statistics (paper 004, section 4.3) and the order in which groups are pushed to disk.

A group's size P_s (bytes held in memory), outputs P_o (results it produced so far, over all its generations),
and last insertion time T_u (event time of its newest accepted tuple); inactivity is T_c - T_u.

Productivity is P_s / P_o with P_s read as the bytes the group has *inserted* over its life: the paper's states
never expire, so there what a group holds is all it inserted. With sliding windows and generations, the bytes
held drop to nothing when a group is pushed while its outputs stay, so held bytes / outputs would call every
freshly pushed group productive (and every fresh generation unproductive); inserted bytes per result is the
stable measure of the same thing (memory spent per result). A large value: few results for the memory spent; no
output at all counts as infinitely unproductive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

POINTER_BYTES = 8  # an object column's reference per value
STRING_SAMPLE = 32  # string values sampled per column for the mean length


@dataclass
class GroupStats:
    """What the adaptation knows of one partition group."""

    size_bytes: int = 0  # P_s
    outputs: int = 0  # P_o
    last_insert_ts: int | None = None  # T_u
    disk_generations: int = 0  # pushed generations: a group with any is never relocated
    inserted_bytes: int = 0  # bytes of every tuple the group accepted, over all generations
    pushed_bytes: int = 0  # bytes its pushed generations held in memory (what a clean-up reads back)

    @property
    def productivity(self) -> float:
        """P_s / P_o: bytes inserted per result produced (inf when it produced nothing)."""
        if self.outputs == 0:
            return math.inf if self.inserted_bytes else 0.0
        return self.inserted_bytes / self.outputs

    def inactivity(self, now_ts: int) -> int | None:
        """T_c - T_u in event-time ms (None before the group's first insertion)."""
        return None if self.last_insert_ts is None else now_ts - self.last_insert_ts


def columns_bytes(columns: Mapping[str, np.ndarray]) -> int:
    """Approximate bytes of columns: numeric ones exactly, strings by a sampled mean length."""
    total = 0
    for column in columns.values():
        if column.dtype != object:
            total += column.nbytes
            continue
        n = len(column)
        if n:
            sample = column[:: max(1, n // STRING_SAMPLE)][:STRING_SAMPLE]
            mean = sum(len(v) if isinstance(v, str | bytes) else POINTER_BYTES for v in sample) / len(sample)
            total += int(n * (POINTER_BYTES + mean))
    return total


def push_order(
    stats: Mapping[int, GroupStats], now_ts: int, theta_t_ms: int | None, choose: str = "least_productive"
) -> list[int]:
    """Groups (holding memory) in the order they should go to disk: inactive ones (idle over theta_t_ms) first,
    longest idle first; then by productivity, largest P_s/P_o first (`least_productive`) or smallest first
    (`most_productive`); ties by size, larger first, then by partition number."""
    inactive, active = [], []
    for part, s in stats.items():
        if s.size_bytes == 0:
            continue
        idle = s.inactivity(now_ts)
        if theta_t_ms is not None and idle is not None and idle > theta_t_ms:
            inactive.append((-idle, part))
        else:
            active.append(part)
    sign = -1.0 if choose == "least_productive" else 1.0
    active.sort(key=lambda p: (sign * stats[p].productivity, -stats[p].size_bytes, p))
    return [p for _, p in sorted(inactive)] + active


def take_until(order: Iterable[int], sizes: Mapping[int, int], target_bytes: float) -> list[int]:
    """The shortest prefix of `order` whose sizes add up to at least `target_bytes` (all of it if they do not)."""
    chosen, total = [], 0
    for part in order:
        if total >= target_bytes:
            break
        chosen.append(part)
        total += sizes[part]
    return chosen
