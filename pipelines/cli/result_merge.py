"""Result lines of several partitions' joins put back in the one order a single join emits them.

A single join emits by later arrival, then task, then the task's own order (`Fed.records`). Every result of
one later arrival comes from the partition that arrival was routed to, already in that order; so ordering the
partitions' lines by the file line of their later arrival, keeping each partition's order among equals, is the
single join's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JoinedLines:
    """Result lines in emission order: `data` holds them end to end, `lengths` their sizes, `later_lines` the
    file line of each one's later arrival."""

    later_lines: np.ndarray
    lengths: np.ndarray
    data: bytes

    def __len__(self) -> int:
        return len(self.lengths)


def merged_lines(parts: Sequence[JoinedLines]) -> bytes:
    """The lines of all `parts` in the single join's order, copied a run of consecutive lines at a time."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0].data if parts else b""
    later = np.concatenate([p.later_lines for p in parts])
    source = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    ends = np.concatenate([np.cumsum(p.lengths) for p in parts])
    starts = ends - np.concatenate([p.lengths for p in parts])
    order = np.argsort(later, kind="stable")
    source, starts, ends = source[order], starts[order], ends[order]
    first = np.flatnonzero(np.r_[True, (source[1:] != source[:-1]) | (starts[1:] != ends[:-1])])
    last = np.r_[first[1:], len(order)] - 1
    views = [memoryview(p.data) for p in parts]
    runs = zip(source[first].tolist(), starts[first].tolist(), ends[last].tolist(), strict=True)
    return b"".join(views[s][a:b] for s, a, b in runs)
