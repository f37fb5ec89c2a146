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


def project(spec: dict, stream: str, event: dict) -> dict:
    """The tuple as the join sees it: timestamp and declared fields only."""
    s = spec["streams"][stream]
    names = [s.get("timestamp", "ts"), *s["fields"]]
    return {n: event[n] for n in names}


def oracle_join(spec: dict, events: list[dict]) -> tuple[list[tuple[str, dict, dict]], list[int]]:
    """All result pairs as (task, left tuple, right tuple), and the positions of events refused as late."""
    window = spec["window"]
    lateness = spec.get("allowed_lateness_ms", 0)
    accepted: list[tuple[str, dict]] = []
    late: list[int] = []
    results = []
    max_ts = None
    for pos, event in enumerate(events):
        stream = event["stream"]
        ts = event[spec["streams"][stream].get("timestamp", "ts")]
        if window["kind"] == "time":
            if max_ts is not None and ts < max_ts - lateness:
                late.append(pos)
                continue
            max_ts = ts if max_ts is None else max(max_ts, ts)
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
                    old_ts = old[spec["streams"][other].get("timestamp", "ts")]
                    if abs(ts - old_ts) > window["size_ms"]:
                        continue
                pair = {stream: tup, other: old}
                if all(_holds(pred, pair) for pred in task.get("on", [])):
                    results.append((task["name"], pair[left], pair[right]))
        accepted.append((stream, tup))
    return results, late


def _holds(pred: dict, pair: dict[str, dict]) -> bool:
    ls, lf = pred["left"].split(".")
    rs, rf = pred["right"].split(".")
    return OPS[pred["op"]](pair[ls][lf], pair[rs][rf], pred.get("width"))


def as_multiset(results: list[tuple[str, dict, dict]]) -> Counter:
    return Counter((task, _frozen(left), _frozen(right)) for task, left, right in results)


def _frozen(tup: dict[str, Any]) -> tuple:
    return tuple(sorted(tup.items()))
