"""The brute-force reference n-way join: every combination of earlier tuples, checked one by one in plain Python.

It re-reads the meaning of an n-way task directly: a combination (one tuple per joined stream) is emitted once,
when its last tuple arrives, if every predicate holds and the combination fits the window: time windows need
max(ts) − min(ts) <= size_ms; count windows need every other tuple among the `size` most recent tuples of its
stream that arrived before the last one. Lateness as in tests/oracle.py.
"""

from __future__ import annotations

from collections import Counter
from itertools import product

from tests.oracle import OPS, project


def oracle_mjoin(spec: dict, events: list[dict]) -> tuple[list[tuple], list[int]]:
    """All results as (task, tuple of the first joined stream, of the second, ...), and the late positions."""
    window = spec["window"]
    lateness = spec.get("allowed_lateness_ms", 0)
    history: dict[str, list[dict]] = {name: [] for name in spec["streams"]}
    results: list[tuple] = []
    late: list[int] = []
    max_ts = None
    for pos, event in enumerate(events):
        stream = event["stream"]
        ts = event[_ts_field(spec, stream)]
        if window["kind"] == "time":
            if max_ts is not None and ts < max_ts - lateness:
                late.append(pos)
                continue
            max_ts = ts if max_ts is None else max(max_ts, ts)
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
                    near = [t for t in history[s] if abs(t[_ts_field(spec, s)] - ts) <= window["size_ms"]]
                    choices.append(near)
            for combo in product(*choices):
                by_stream = dict(zip(task["join"], combo, strict=True))
                if _fits(spec, window, by_stream) and all(_holds(p, by_stream) for p in task.get("on", [])):
                    results.append((task["name"], *combo))
        history[stream].append(new)
    return results, late


def _ts_field(spec: dict, stream: str) -> str:
    return spec["streams"][stream].get("timestamp", "ts")


def _fits(spec: dict, window: dict, by_stream: dict[str, dict]) -> bool:
    if window["kind"] == "count":
        return True  # the choices were already the last `size` tuples of each stream
    times = [tup[_ts_field(spec, s)] for s, tup in by_stream.items()]
    return max(times) - min(times) <= window["size_ms"]


def _holds(pred: dict, by_stream: dict[str, dict]) -> bool:
    ls, lf = pred["left"].split(".")
    rs, rf = pred["right"].split(".")
    return OPS[pred["op"]](by_stream[ls][lf], by_stream[rs][rf], pred.get("width"))


def as_multiset(results: list[tuple]) -> Counter:
    return Counter((task, *(tuple(sorted(t.items())) for t in tuples)) for task, *tuples in results)
