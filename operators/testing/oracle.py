"""The brute-force reference join: plain nested loops over Python lists, written apart from the operators.

It re-reads the spec's meaning directly, from the spec as a plain dict (as loaded from YAML), and imports
nothing of the operators. 2-way (`oracle_join`): a pair (a, b) of a task's streams is emitted once, when the
later of the two arrives, if the earlier one is inside its window at that moment and every predicate holds.
n-way (`oracle_mjoin`): a combination (one tuple per joined stream) is emitted once, when its last tuple
arrives, if every predicate holds and the combination fits the window: time windows need max(ts) - min(ts) <=
size_ms; count windows need every other tuple among the `size` most recent tuples of its stream that arrived
before the last one.
"""

from __future__ import annotations

from collections import Counter
from itertools import product
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


def oracle_mjoin(spec: dict, events: list[dict]) -> tuple[list[tuple], list[int]]:
    """All results as (task, tuple of the first joined stream, of the second, ...), and the late positions."""
    window = spec["window"]
    on_time, late = split_late(spec, events)
    history: dict[str, list[dict]] = {name: [] for name in spec["streams"]}
    results: list[tuple] = []
    for event in on_time:
        stream = event["stream"]
        ts = event[ts_field(spec, stream)]
        new = project(spec, stream, event)
        for task in spec["tasks"]:
            if stream not in task["join"]:
                continue
            choices = []
            for s in task["join"]:
                if s == stream:
                    choices.append([new])
                elif window["kind"] == "count":
                    choices.append(history[s][max(0, len(history[s]) - window["size"]) :])
                else:  # every other tuple is within size_ms of the new one (a necessary condition, checked below)
                    near = [t for t in history[s] if abs(t[ts_field(spec, s)] - ts) <= window["size_ms"]]
                    choices.append(near)
            for combo in product(*choices):
                by_stream = dict(zip(task["join"], combo, strict=True))
                if _fits(spec, window, by_stream) and all(holds(p, by_stream) for p in task.get("on", [])):
                    results.append((task["name"], *combo))
        history[stream].append(new)
    return results, late


def _fits(spec: dict, window: dict, by_stream: dict[str, dict]) -> bool:
    if window["kind"] == "count":
        return True  # the choices were already the last `size` tuples of each stream
    times = [tup[ts_field(spec, s)] for s, tup in by_stream.items()]
    return max(times) - min(times) <= window["size_ms"]


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
