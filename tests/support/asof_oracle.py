"""The brute-force as-of join over plain lists, written apart from the operators: each accepted left tuple with the
accepted right tuple of greatest event time at or before its own among those meeting every predicate (the
equalities), ties in time won by the later arrival, none if it is older than max_age_ms; asof emits the left
tuples that have one, asof_left every left tuple (the right side None without one)."""

from __future__ import annotations

from collections import Counter

from tests.support.window_oracle import _holds, _project, _ts, accepted_events


def oracle_asof(spec: dict, events: list[dict]) -> tuple[Counter, list[int]]:
    """The multiset of (task, left tuple, right tuple | None), and the late positions."""
    accepted, late = accepted_events(spec, events)
    out: Counter = Counter()
    for task in spec["tasks"]:
        first, second = task["join"]
        max_age = task.get("max_age_ms")
        for left in (e for e in accepted if e["stream"] == first):
            ts = _ts(spec, first, left)
            best = None
            for arrival, right in enumerate(accepted):
                if right["stream"] != second or not _holds(task, left, right):
                    continue
                version_ts = _ts(spec, second, right)
                if version_ts <= ts and (best is None or (version_ts, arrival) >= best[0]):
                    best = ((version_ts, arrival), right)
            if best is not None and max_age is not None and ts - best[0][0] > max_age:
                best = None
            if best is not None:
                out[task["name"], _project(spec, first, left), _project(spec, second, best[1])] += 1
            elif task["type"] == "asof_left":
                out[task["name"], _project(spec, first, left), None] += 1
    return out, late


def joined_asof(spec: dict, results: list[dict]) -> Counter:
    out: Counter = Counter()
    for r in results:
        task = next(t for t in spec["tasks"] if t["name"] == r["task"])
        sides = [None if r[s] is None else tuple(sorted(r[s].items())) for s in task["join"]]
        out[(r["task"], *sides)] += 1
    return out
