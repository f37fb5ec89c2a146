"""The brute-force reference n-way join: every combination of earlier tuples, checked one by one in plain Python.

It re-reads the meaning of an n-way task directly: a combination (one tuple per joined stream) is emitted once,
when its last tuple arrives, if every predicate holds and the combination fits the window: time windows need
max(ts) − min(ts) <= size_ms; count windows need every other tuple among the `size` most recent tuples of its
stream that arrived before the last one. Lateness, predicates and `as_multiset` are tests/oracle.py's.
"""

from __future__ import annotations

from itertools import product

from tests.oracle import holds, project, split_late, ts_field


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
