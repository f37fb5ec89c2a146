"""Query builders shared by the PMJoin planner tests (plain data, no planner logic)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from windjoin.operators.pmjoin.model import EqualityClass, Query, Stream


def single_attribute_query(rates_per_value: list[list[float]], windows: list[float], nodes: list[str]) -> Query:
    """Streams joined on one attribute; rates_per_value[i][v] is stream i's rate for value v; time windows."""
    streams, weights = [], []
    for i, (per_value, t) in enumerate(zip(rates_per_value, windows, strict=True)):
        rate = float(sum(per_value))
        streams.append(Stream(f"S{i}", nodes[i], rate, rate * t))
        weights.append(np.array(per_value, dtype=float) / rate)
    values = np.arange(len(rates_per_value[0]), dtype=np.int64)
    cls = EqualityClass("a", tuple(range(len(streams))), ("a",) * len(streams), values, np.array(weights))
    return Query(tuple(streams), tuple(dict.fromkeys(nodes)), (cls,))


@st.composite
def single_attribute_queries(draw, max_streams: int = 6, max_values: int = 6) -> Query:
    n = draw(st.integers(2, max_streams))
    n_values = draw(st.integers(1, max_values))
    n_nodes = draw(st.integers(1, n))
    rate = st.one_of(st.just(0.0), st.floats(0.01, 100.0))
    rows = []
    for _ in range(n):
        row = draw(st.lists(rate, min_size=n_values, max_size=n_values))
        if sum(row) == 0:
            row[0] = 1.0
        rows.append(row)
    windows = draw(st.lists(st.floats(0.05, 20.0), min_size=n, max_size=n))
    nodes = [f"n{draw(st.integers(0, n_nodes - 1))}" for _ in range(n)]
    return single_attribute_query(rows, windows, nodes)


@st.composite
def multi_attribute_queries(draw, max_streams: int = 6, max_values: int = 4) -> Query:
    """Streams over two attributes a and b; each join is an equality class on one of them; connected."""
    n = draw(st.integers(2, max_streams))
    n_nodes = draw(st.integers(1, n))
    streams = []
    for i in range(n):
        rate = draw(st.floats(0.1, 100.0))
        streams.append(Stream(f"S{i}", f"n{draw(st.integers(0, n_nodes - 1))}", rate, rate * draw(st.floats(0.1, 10))))
    # A random spanning tree of joins, then a second attribute class over a random subset.
    classes = []
    members_a = [0]
    members_b: list[int] = []
    for i in range(1, n):
        (members_a if draw(st.booleans()) else members_b).append(i)
    if members_b:  # a stream of class a also joins on b, so the join graph is connected
        members_b.append(draw(st.sampled_from(members_a)))
    for name, members in (("a", members_a), ("b", members_b)):
        if len(members) < 2:
            continue
        k = draw(st.integers(1, max_values))
        w = np.array([draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k)) for _ in members]) + 1e-3
        w /= w.sum(axis=1, keepdims=True)
        classes.append(EqualityClass(name, tuple(members), (name,) * len(members), np.arange(k), w))
    return Query(tuple(streams), tuple(dict.fromkeys(s.node for s in streams)), tuple(classes))
