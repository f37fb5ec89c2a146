"""The brute-force reference join: plain nested loops over Python lists, written apart from the operators.

It re-reads the spec's meaning directly, from the spec as a plain dict (as loaded from YAML), and imports
nothing of the operators. 2-way (`oracle_join`): a pair (a, b) of a task's streams is emitted once, when the
later of the two arrives, if the earlier one is inside its window at that moment and every predicate holds; in
a time window the task's bounds hold: lower_ms <= b.ts - a.ts <= upper_ms, a and b in the task's `join` order
(`size_ms` alone is the bounds [-size_ms, size_ms]; a task's own `window` overrides the spec's).
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


def oracle_join(spec: dict, events: list[dict]) -> tuple[list[tuple[str, dict | None, dict | None]], list[int]]:
    """All results of a complete input as (task, left tuple, right tuple), and the positions of events refused as
    late. Pairs come in emission order; then, per task of another type than inner, its rows of one side
    alone (the other None): the left tuples that ever paired (semi), or the tracked sides' tuples that never did
    (left: left, right: right, full: both, anti: left), in arrival order."""
    window = spec["window"]
    on_time, late = split_late(spec, events)
    accepted: list[tuple[str, dict]] = []
    results = []
    paired: dict[str, set[int]] = {task["name"]: set() for task in spec["tasks"]}  # arrival numbers that paired
    for number, event in enumerate(on_time):
        stream = event["stream"]
        tup = project(spec, stream, event)
        for task in spec["tasks"]:
            left, right = task["join"]
            if stream not in (left, right):
                continue
            other = right if stream == left else left
            earlier = [(n, t) for n, (s, t) in enumerate(accepted) if s == other]
            if window["kind"] == "count":
                earlier = earlier[-window["size"] :] if window["size"] else []
            for old_number, old in earlier:
                pair = {stream: tup, other: old}
                if window["kind"] == "time":
                    lower, upper = bounds(spec, task)
                    if not lower <= pair[right][ts_field(spec, right)] - pair[left][ts_field(spec, left)] <= upper:
                        continue
                if all(holds(pred, pair) for pred in task.get("on", [])):
                    results.append((task["name"], pair[left], pair[right]))
                    paired[task["name"]] |= {number, old_number}
        accepted.append((stream, tup))
    emit_pairs = {t["name"] for t in spec["tasks"] if t.get("type", "inner") not in ("semi", "anti")}
    results = [r for r in results if r[0] in emit_pairs]
    for task in spec["tasks"]:
        kind = task.get("type", "inner")
        left, right = task["join"]
        for number, (stream, tup) in enumerate(accepted):
            alone = number not in paired[task["name"]]
            if kind == "semi":
                wanted = stream == left and not alone
            else:
                sides = {"left": (left,), "right": (right,), "full": (left, right), "anti": (left,)}.get(kind, ())
                wanted = stream in sides and alone
            if wanted:
                results.append((task["name"], tup if stream == left else None, tup if stream == right else None))
    return results, late


def bounds(spec: dict, task: dict) -> tuple[int, int]:
    """(lower, upper) on the second joined stream's event time less the first's, for a time window."""
    window = task.get("window") or spec["window"]
    if window.get("size_ms") is not None:
        return -window["size_ms"], window["size_ms"]
    return window["lower_ms"], window["upper_ms"]


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
                    size = bounds(spec, task)[1]  # n-way tasks take a symmetric window
                    near = [t for t in history[s] if abs(t[ts_field(spec, s)] - ts) <= size]
                    choices.append(near)
            for combo in product(*choices):
                by_stream = dict(zip(task["join"], combo, strict=True))
                if _fits(spec, task, by_stream) and all(holds(p, by_stream) for p in task.get("on", [])):
                    results.append((task["name"], *combo))
        history[stream].append(new)
    return results, late


def _fits(spec: dict, task: dict, by_stream: dict[str, dict]) -> bool:
    if spec["window"]["kind"] == "count":
        return True  # the choices were already the last `size` tuples of each stream
    times = [tup[ts_field(spec, s)] for s, tup in by_stream.items()]
    return max(times) - min(times) <= bounds(spec, task)[1]


def holds(pred: dict, by_stream: dict[str, dict]) -> bool:
    """Whether the predicate holds between the tuples of its two streams (`by_stream`: stream → tuple)."""
    ls, lf = pred["left"].split(".")
    rs, rf = pred["right"].split(".")
    return OPS[pred["op"]](by_stream[ls][lf], by_stream[rs][rf], pred.get("width"))


def as_multiset(results: list[tuple]) -> Counter:
    """(task, tuple, tuple, ...) results, 2-way or n-way, as a multiset that ignores order."""
    return Counter((task, *(_frozen(t) for t in tuples)) for task, *tuples in results)


def _frozen(tup: dict[str, Any] | None) -> tuple | None:
    return None if tup is None else tuple(sorted(tup.items()))
