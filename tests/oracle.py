"""The brute-force reference join: plain nested loops over Python lists, written apart from the operators.

It re-reads the spec's meaning directly: a pair (a, b) of a task's streams is emitted once, when the later
of the two arrives, if the earlier one is inside its window at that moment and every predicate holds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

OPS = {
    "eq": lambda left, right, w: left == right,
    "ne": lambda left, right, w: left != right,
    "lt": lambda left, right, w: left < right,
    "le": lambda left, right, w: left <= right,
    "gt": lambda left, right, w: left > right,
    "ge": lambda left, right, w: left >= right,
    "band": lambda left, right, w: abs(left - right) <= w,
    "outside": lambda left, right, w: abs(left - right) > w,
}


def ts_field(spec: dict, stream: str) -> str:
    return spec["streams"][stream].get("timestamp", "ts")


def project(spec: dict, stream: str, event: dict) -> dict:
    """The tuple as the join sees it: timestamp and declared fields only."""
    names = [ts_field(spec, stream), *spec["streams"][stream]["fields"]]
    return {n: event[n] for n in names}


def split_late(spec: dict, events: list[dict]) -> tuple[list[dict], list[int]]:
    """The events a join accepts, in order, and the positions of those refused as late: with a time window, an
    event older than the largest timestamp accepted before it by more than allowed_lateness_ms."""
    lateness = spec.get("allowed_lateness_ms", 0)
    accepted: list[dict] = []
    late: list[int] = []
    max_ts = None
    for pos, event in enumerate(events):
        ts = event[ts_field(spec, event["stream"])]
        if spec["window"]["kind"] == "time":
            if max_ts is not None and ts < max_ts - lateness:
                late.append(pos)
                continue
            max_ts = ts if max_ts is None else max(max_ts, ts)
        accepted.append(event)
    return accepted, late


def oracle_join(spec: dict, events: list[dict]) -> tuple[list[tuple[str, dict, dict]], list[int]]:
    """All result pairs as (task, left tuple, right tuple), and the positions of events refused as late."""
    window = spec["window"]
    on_time, late = split_late(spec, events)
    accepted: list[tuple[str, dict]] = []
    results = []
    for event in on_time:
        stream = event["stream"]
        ts = event[ts_field(spec, stream)]
        tup = project(spec, stream, event)
        for task in spec["tasks"]:
            left, right = task["join"]
            if stream not in (left, right):
                continue
            other = right if stream == left else left
            earlier = [t for s, t in accepted if s == other]
            if window["kind"] == "count":
                earlier = earlier[-window["size"] :] if window["size"] else []
            for old in earlier:
                if window["kind"] == "time":
                    old_ts = old[ts_field(spec, other)]
                    if abs(ts - old_ts) > window["size_ms"]:
                        continue
                pair = {stream: tup, other: old}
                if all(holds(pred, pair) for pred in task.get("on", [])):
                    results.append((task["name"], pair[left], pair[right]))
        accepted.append((stream, tup))
    return results, late


def holds(pred: dict, by_stream: dict[str, dict]) -> bool:
    """Whether the predicate holds between the tuples of its two streams (`by_stream`: stream → tuple)."""
    ls, lf = pred["left"].split(".")
    rs, rf = pred["right"].split(".")
    return OPS[pred["op"]](by_stream[ls][lf], by_stream[rs][rf], pred.get("width"))


def as_multiset(results: list[tuple]) -> Counter:
    """(task, tuple, tuple, ...) results, 2-way or n-way, as a multiset that ignores order."""
    return Counter((task, *(_frozen(t) for t in tuples)) for task, *tuples in results)


def _frozen(tup: dict[str, Any]) -> tuple:
    return tuple(sorted(tup.items()))
