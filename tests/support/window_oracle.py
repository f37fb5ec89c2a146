"""Brute-force tumbling and hopping window joins over plain lists, written apart from the operators.

It reads the spec as a plain dict. A tuple stands in every window [start, start + size_ms) holding its event time,
starts at offset_ms + j * hop_ms (tumbling: hop = size). Per task and window holding both, a pair of tuples whose
predicates hold comes out once (inner, left, right, full); each tuple of a tracked stream with no partner in a
window comes out alone for that window (left, right, full: either side as the type says; anti: the left side);
semi: each left tuple once per window where it has a partner. Late events (older than the largest event time
before them by more than allowed_lateness_ms) are refused.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from windjoin.operators.testing.oracle import OPS  # plain lambdas over Python values, no operator code


def _ts(spec: dict, stream: str, event: dict) -> int:
    return event[spec["streams"][stream].get("timestamp", "ts")]


def _project(spec: dict, stream: str, event: dict) -> tuple:
    names = [spec["streams"][stream].get("timestamp", "ts"), *spec["streams"][stream]["fields"]]
    return tuple(sorted((n, event[n]) for n in names))


def windows_of(window: dict, ts: int) -> list[int]:
    """The start of every window holding `ts`, by counting through the candidates one by one."""
    size = window["size_ms"]
    hop = window.get("hop_ms", size)
    offset = window.get("offset_ms", 0)
    return [start for start in range(ts - size + 1, ts + 1) if (start - offset) % hop == 0]


def accepted_events(spec: dict, events: list[dict]) -> tuple[list[dict], list[int]]:
    lateness = spec.get("allowed_lateness_ms", 0)
    accepted, late, max_ts = [], [], None
    for pos, event in enumerate(events):
        ts = _ts(spec, event["stream"], event)
        if max_ts is not None and ts < max_ts - lateness:
            late.append(pos)
            continue
        max_ts = ts if max_ts is None else max(max_ts, ts)
        accepted.append(event)
    return accepted, late


def _holds(task: dict, left: dict, right: dict) -> bool:
    for pred in task.get("on", []):
        values = {}
        for side in ("left", "right"):
            stream, field = pred[side].split(".")
            values[side] = (left if stream == task["join"][0] else right)[field]
        if not OPS[pred["op"]](values["left"], values["right"], pred.get("width")):
            return False
    return True


def oracle_windowed(spec: dict, events: list[dict]) -> tuple[Counter, list[int]]:
    """The multiset of (task, window_start, window_end, left tuple | None, right tuple | None), and the late
    positions."""
    accepted, late = accepted_events(spec, events)
    window = spec["window"]
    size = window["size_ms"]
    out: Counter = Counter()
    for task in spec["tasks"]:
        first, second = task["join"]
        kind = task.get("type", "inner")
        lefts = [e for e in accepted if e["stream"] == first]
        rights = [e for e in accepted if e["stream"] == second]
        partnered: dict[tuple[int, int], set[int]] = {}  # (id of a tuple, window) -> partner ids
        for a in lefts:
            for b in rights:
                if not _holds(task, a, b):
                    continue
                shared = set(windows_of(window, _ts(spec, first, a))) & set(windows_of(window, _ts(spec, second, b)))
                for start in shared:
                    partnered.setdefault((id(a), start), set()).add(id(b))
                    partnered.setdefault((id(b), start), set()).add(id(a))
                    if kind in ("inner", "left", "right", "full"):
                        out[task["name"], start, start + size, _project(spec, first, a), _project(spec, second, b)] += 1
        alone = {"left": (first,), "right": (second,), "full": (first, second), "anti": (first,)}.get(kind, ())
        for stream, tuples in ((first, lefts), (second, rights)):
            for t in tuples:
                for start in windows_of(window, _ts(spec, stream, t)):
                    row = _project(spec, stream, t)
                    pair = (row, None) if stream == first else (None, row)
                    has = (id(t), start) in partnered
                    if (stream in alone and not has) or (kind == "semi" and stream == first and has):
                        out[(task["name"], start, start + size, *pair)] += 1
    return out, late


def joined_multiset(spec: dict, results: list[dict[str, Any]]) -> Counter:
    """The join's records in the oracle's shape."""
    out: Counter = Counter()
    for r in results:
        task = next(t for t in spec["tasks"] if t["name"] == r["task"])
        sides = [None if r[s] is None else tuple(sorted(r[s].items())) for s in task["join"]]
        out[(r["task"], r["window_start"], r["window_end"], *sides)] += 1
    return out


def as_oracle(task: dict, row: dict) -> tuple:
    """A sink's row in the oracle's shape: (task, [window_start, window_end,] left, right), tuples as sorted
    items."""
    sides = [None if row[s] is None else tuple(sorted(row[s].items())) for s in task["join"]]
    window = (row["window_start"], row["window_end"]) if "window_start" in row else ()
    return (task["name"], *window, *sides)
