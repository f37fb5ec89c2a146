"""Brute-force reference for the site runs: every combination of one tuple per stream, checked in plain Python.

Written from the join's meaning alone, independently of MJoin and of the site engine: a combination (one tuple
of each stream) is a result when max(ts) − min(ts) <= window_ms and, for every equality class, its members'
attributes are equal. Nested loops over each stream's tuples sorted by ts; a stream's candidates are those within
the window of the first stream's tuple (bisect), then each partial combination is checked as it grows.

`expected_edge_tuples` derives from it what each edge of an execution plan must carry (the plan says which
streams and which substream group an edge stands for; the counts come from the oracle alone).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter

from windjoin.operators.pmjoin.execution import ExecutionPlan, Feed
from windjoin.operators.pmjoin.model import bits


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


def oracle_for(plan: ExecutionPlan, events: dict[str, list[dict]], mask: int) -> Counter:
    """Oracle combinations (ids) of the streams in `mask`, with the predicates among them only."""
    names = [plan.streams[b].name for b in bits(mask)]
    classes = [[(m, a) for m, a in zip(c.members, c.attributes, strict=True) if m in names] for c in plan.classes]
    return oracle_combinations(names, events, classes, plan.window_ms)


def restriction(plan: ExecutionPlan, feed: Feed) -> tuple[int, tuple] | None:
    """(class, values) a feed's rows are restricted to: its own filter, else that of the instance producing it."""
    if feed.filter_class is not None:
        return feed.filter_class, feed.values
    kind, _, name = feed.channel.partition(":")
    if kind == "src" or not plan.instance(int(name)).group:  # a source, or a join outside any PMJoin group
        return None
    found = [restriction(plan, f) for slot in plan.instance(int(name)).slots for f in slot.feeds]
    return next((r for r in found if r is not None), None)


def expected_edge_tuples(plan: ExecutionPlan, events: dict[str, list[dict]]) -> Counter:
    """Per edge (channel, instance, slot): the sub-join its channel carries, restricted to its group's values.

    `events[stream]` lists a stream's events (dicts with ts, id and attributes).
    """
    by_id = {name: {e["id"]: e for e in evs} for name, evs in events.items()}
    out: Counter = Counter()
    for inst in plan.instances:
        for k, slot in enumerate(inst.slots):
            for feed in slot.feeds:
                if feed.site == inst.site:
                    continue
                combos = oracle_for(plan, events, feed.mask)
                names = [plan.streams[b].name for b in bits(feed.mask)]
                limit = restriction(plan, feed)
                if limit is not None:
                    cls = plan.classes[limit[0]]
                    member = next(i for i, n in enumerate(names) if n in cls.members)
                    attr = cls.attributes[cls.members.index(names[member])]
                    values = set(limit[1])
                    combos = Counter(
                        {ids: c for ids, c in combos.items() if by_id[names[member]][ids[member]][attr] in values}
                    )
                out[(feed.channel, inst.id, k)] += sum(combos.values())
    return out
