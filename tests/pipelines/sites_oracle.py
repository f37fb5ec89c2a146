"""Brute-force reference for the site runs: every combination of one tuple per stream, checked in plain Python.

Written from the join's meaning alone, independently of MJoin and of the site engine: a combination (one tuple
of each stream) is a result when max(ts) − min(ts) <= window_ms and, for every equality class, its members'
attributes are equal. Nested loops over each stream's tuples sorted by ts; a stream's candidates are those within
the window of the first stream's tuple (bisect), then each partial combination is checked as it grows.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter


def oracle_combinations(
    streams: list[str],
    events: dict[str, list[dict]],
    classes: list[list[tuple[str, str]]],
    window_ms: int,
) -> Counter:
    """Multiset of results, each the tuple of the joined tuples' ids in `streams` order."""
    ordered = {s: sorted(events[s], key=lambda e: e["ts"]) for s in streams}
    times = {s: [e["ts"] for e in ordered[s]] for s in streams}
    out: Counter = Counter()

    def agree(chosen: dict[str, dict]) -> bool:
        for cls in classes:
            vals = [chosen[s][a] for s, a in cls if s in chosen]
            if any(v != vals[0] for v in vals):
                return False
        return True

    def extend(level: int, chosen: dict[str, dict], lo: int, hi: int, anchor: int) -> None:
        if level == len(streams):
            out[tuple(chosen[s]["id"] for s in streams)] += 1
            return
        s = streams[level]
        first, last = bisect_left(times[s], anchor - window_ms), bisect_right(times[s], anchor + window_ms)
        for e in ordered[s][first:last]:
            new_lo, new_hi = min(lo, e["ts"]), max(hi, e["ts"])
            if new_hi - new_lo > window_ms:
                continue
            chosen[s] = e
            if agree(chosen):
                extend(level + 1, chosen, new_lo, new_hi, anchor)
            del chosen[s]

    for e in ordered[streams[0]]:
        extend(1, {streams[0]: e}, e["ts"], e["ts"], e["ts"])
    return out
