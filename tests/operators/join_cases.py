"""Random specs and event sequences for the operator-against-oracle tests, and the check itself."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.operators.run import run_join
from windjoin.operators.testing.oracle import as_multiset, oracle_join

STREAMS = {
    "R": {"timestamp": "ts", "fields": {"k": "int", "x": "int", "y": "float", "z": "string", "f": "bool"}},
    "S": {"timestamp": "t", "fields": {"k": "int", "a": "int", "b": "float", "c": "string", "d": "bool"}},
}
# (op family, R field, S field): every comparable pairing, including int/float mixes and the timestamps.
PAIRS = {
    "eq": [("k", "k"), ("x", "a"), ("y", "b"), ("x", "b"), ("z", "c"), ("f", "d")],
    "ne": [("k", "k"), ("y", "b"), ("z", "c"), ("f", "d")],
    "order": [("x", "a"), ("y", "b"), ("y", "a"), ("z", "c"), ("ts", "t")],
    "width": [("x", "a"), ("y", "b"), ("x", "b"), ("ts", "t")],
}


@st.composite
def predicates(draw):
    family = draw(st.sampled_from(sorted(PAIRS)))
    r_field, s_field = draw(st.sampled_from(PAIRS[family]))
    left, right = ("R." + r_field, "S." + s_field)
    if draw(st.booleans()):
        left, right = right, left
    if family == "eq":
        return {"op": "eq", "left": left, "right": right}
    if family == "ne":
        return {"op": "ne", "left": left, "right": right}
    if family == "order":
        return {"op": draw(st.sampled_from(["lt", "le", "gt", "ge"])), "left": left, "right": right}
    width = draw(st.one_of(st.integers(0, 6), st.sampled_from([0.5, 1.25, 2.0, 3.75])))
    return {"op": draw(st.sampled_from(["band", "band", "outside"])), "left": left, "right": right, "width": width}


@st.composite
def time_windows(draw):
    """Every bound shape: symmetric (size_ms), around zero, wholly after or before, a single point."""
    shape = draw(st.sampled_from(["size", "around", "after", "before", "point"]))
    if shape == "size":
        return {"kind": "time", "size_ms": draw(st.integers(1, 40))}
    if shape == "around":
        lower, upper = draw(st.integers(-40, 0)), draw(st.integers(0, 40))
    elif shape == "after":
        lower = draw(st.integers(0, 20))
        upper = lower + draw(st.integers(0, 20))
    elif shape == "before":
        upper = draw(st.integers(-20, 0))
        lower = upper - draw(st.integers(0, 20))
    else:
        lower = upper = draw(st.integers(-10, 10))
    return {"kind": "time", "lower_ms": lower, "upper_ms": upper}


@st.composite
def specs(draw):
    timed = draw(st.booleans())
    window = draw(time_windows()) if timed else {"kind": "count", "size": draw(st.integers(1, 12))}
    n_tasks = draw(st.integers(1, 3))
    tasks = []
    for i in range(n_tasks):
        join = ["R", "S"] if draw(st.booleans()) else ["S", "R"]
        tasks.append({"name": f"t{i}", "join": join, "on": draw(st.lists(predicates(), max_size=3))})
        if timed and draw(st.integers(0, 3)) == 0:  # sometimes a task bounds its pairs its own way
            tasks[-1]["window"] = draw(time_windows())
    return {
        "window": window,
        "allowed_lateness_ms": draw(st.integers(0, 15)),
        "streams": STREAMS,
        "tasks": tasks,
    }


EVENT_FIELDS = {"R": ("ts", "x", "y", "z", "f"), "S": ("t", "a", "b", "c", "d")}  # STREAMS' fields by type


@st.composite
def events(draw, hot_key: bool = False):
    n = draw(st.integers(0, 70))
    out, clock = [], 0
    floats = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 2.25, 3.0, 4.5, -1.0, 7.75])
    for _ in range(n):
        clock += draw(st.integers(0, 4))  # ties are common
        ts = max(0, clock - draw(st.integers(0, 20)))  # out of order, sometimes beyond the lateness
        key = 0 if hot_key else draw(st.integers(0, 3))
        stream = "R" if draw(st.booleans()) else "S"
        ts_name, int_name, float_name, str_name, bool_name = EVENT_FIELDS[stream]
        event = {"stream": stream, ts_name: ts, "k": key, int_name: draw(st.integers(-3, 8)), float_name: draw(floats)}
        event[str_name] = draw(st.sampled_from(["", "a", "b", "ab"]))
        event[bool_name] = draw(st.booleans())
        out.append(event)
    return out


def check_against_oracle(spec: dict, evs: list[dict], chunk_size: int, oracle: tuple | None = None) -> None:
    """The join of `evs` in chunks of `chunk_size` equals `oracle` (the brute force's answer, computed when None)."""
    expected, expected_late = oracle_join(spec, evs) if oracle is None else oracle
    got, late, join = run_join(spec, evs, chunk_size)
    assert late == expected_late
    assert as_multiset(got) == as_multiset(expected)
    for task in spec["tasks"]:
        name = task["name"]
        # the pairs' emission order too: by the later tuple's arrival, then the earlier's
        both = [r for r in got if r[0] == name and None not in r]
        assert both == [r for r in expected if r[0] == name and None not in r]
        counters = join.counters[name]
        assert counters.outputs == sum(1 for r in expected if r[0] == name)
        assert counters.comparisons >= len(both)
