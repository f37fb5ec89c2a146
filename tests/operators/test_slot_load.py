"""Per-partition load reports of a slot: state bytes of real windows, seconds apportioned to add up, window
tuples by mini bits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.operators.batch import Arrivals
from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.control.slot_load import (
    GROUP_FIELDS,
    GroupLoadMeter,
    PartState,
    join_state,
    partition_state,
    pooled_state,
)
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import key_hash, partition_of
from windjoin.operators.spec import parse_spec

SPEC = {
    "window": {"kind": "time", "size_ms": 1_000_000},
    "streams": {"R": {"fields": {"k": "int", "name": "string"}}, "S": {"fields": {"k": "int", "v": "float"}}},
    "tasks": [{"name": "eq", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}


def _filled(n_r: int, n_s: int, name: str) -> WindowJoin:
    join = WindowJoin(parse_spec(SPEC))
    ts = np.arange(n_r + n_s, dtype=np.int64)
    r = {"ts": ts[:n_r], "k": np.arange(n_r, dtype=np.int64), "name": np.array([name] * n_r, dtype=object)}
    s = {"ts": ts[n_r:], "k": np.arange(n_s, dtype=np.int64), "v": np.zeros(n_s)}
    join.process({"R": Arrivals(r, np.arange(n_r)), "S": Arrivals(s, np.arange(n_r, n_r + n_s))})
    return join


def _held(joins: dict[int, WindowJoin]) -> dict[int, PartState]:
    return {part: partition_state(join) for part, join in joins.items()}


def test_state_bytes_count_numeric_columns_exactly_and_strings_by_length():
    tuples, state = join_state(_filled(100, 50, "abcd"))
    assert tuples == 150
    # R: ts, k (8 bytes each) + name (8-byte reference + 4 characters); S: ts, k, v (8 bytes each)
    assert state == 100 * (8 + 8 + 8 + 4) + 50 * 24
    assert join_state(_filled(100, 50, "a" * 40))[1] - state == 100 * 36


def test_groups_seconds_add_up_to_the_slot_and_unfed_partitions_still_report_their_state():
    joins = {3: _filled(10, 10, "x"), 7: _filled(30, 0, "x"), 9: _filled(0, 5, "x")}
    meter = GroupLoadMeter()
    meter.record(3, 20, 20, 0.1, 0.05)
    meter.record(7, 60, 0, 0.2, 0.15)
    report = meter.report(_held(joins), total_seconds=0.5, total_cpu=0.4)
    assert set(report) == set(GROUP_FIELDS)
    assert report["part"] == [3, 7, 9]
    assert report["tuples_in"] == [20, 60, 0]
    assert report["outputs"] == [20, 0, 0]
    assert report["window_tuples"] == [20, 30, 5]
    # the 0.2 s (0.2 CPU s) not measured per partition go by rows in plus pairs out: 40 and 60 of 100
    assert report["seconds"] == pytest.approx([0.18, 0.32, 0.0])
    assert report["cpu"] == pytest.approx([0.13, 0.27, 0.0])
    assert sum(report["seconds"]) == pytest.approx(0.5) and sum(report["cpu"]) == pytest.approx(0.4)


def test_rows_in_are_reported_by_mini_bits_beside_the_window_tuples():
    meter = GroupLoadMeter()
    arrivals = np.arange(1 << FINE_DEPTH)
    meter.record(3, int(arrivals.sum()), 0, 0.1, 0.1, arrivals)
    meter.record(3, int(arrivals.sum()), 0, 0.1, 0.1, arrivals)  # a partition joined twice in a batch adds up
    report = meter.report(_held({3: _filled(1, 1, "x"), 4: _filled(1, 1, "x")}), 0.2, 0.2)
    assert report["fine_in"] == [(2 * arrivals).tolist(), [0] * (1 << FINE_DEPTH)]


def test_an_idle_batch_spreads_its_seconds_evenly():
    report = GroupLoadMeter().report(_held({1: _filled(1, 1, "x"), 2: _filled(1, 1, "x")}), total_seconds=0.4)
    assert report["seconds"] == pytest.approx([0.2, 0.2])
    assert GroupLoadMeter().report({}, 0.3) == dict.fromkeys(GROUP_FIELDS, [])


KEYED = {
    "window": {"kind": "time", "size_ms": 100},
    "allowed_lateness_ms": 40,  # a batch's tuples arrive in any order within 40 ms
    "streams": {
        "R": {"fields": {"k": "int"}, "key": "k"},
        "S": {"fields": {"k": "int", "v": "float"}, "key": "k"},
        "A": {"fields": {"name": "string"}, "key": "name"},
        "B": {"fields": {"name": "string"}, "key": "name"},
        "T": {"fields": {"k": "int"}},  # no key: all in partition 0, not in the histogram
        "U": {"fields": {"k": "int"}},
    },
    "tasks": [
        {"name": "rs", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]},
        {"name": "ab", "join": ["A", "B"], "on": [{"op": "eq", "left": "A.name", "right": "B.name"}]},
        {"name": "tu", "join": ["T", "U"], "on": [{"op": "eq", "left": "T.k", "right": "U.k"}]},
    ],
    "partitions": 6,
}
KEY = {"R": "k", "S": "k", "A": "name", "B": "name"}


def _expected_fine(keys: list, partitions: int) -> list[int]:
    """Per-key count, one hash at a time: bin = (H(key) // partitions) mod 2^FINE_DEPTH."""
    counts = [0] * (1 << FINE_DEPTH)
    for k in keys:
        h = int(key_hash(np.asarray([k], dtype=object if isinstance(k, str) else np.int64))[0])
        counts[(h // partitions) % (1 << FINE_DEPTH)] += 1
    return counts


def _columns(stream: str, keys: list[int], ts: list[int]) -> dict[str, np.ndarray]:
    cols = {"ts": np.asarray(ts, dtype=np.int64)}
    if stream in "AB":
        cols["name"] = np.asarray([f"n{k}" for k in keys], dtype=object)
    else:
        cols["k"] = np.asarray(keys, dtype=np.int64)
    if stream == "S":
        cols["v"] = np.zeros(len(keys))
    return cols


# batches of (stream, key, time offset in the batch); time advances 30 ms a batch
KEYED_BATCHES = st.lists(
    st.lists(st.tuples(st.sampled_from("RSABTU"), st.integers(-50, 50), st.integers(0, 40)), max_size=60),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None)
@given(batches=KEYED_BATCHES)
def test_fine_column_counts_the_windows_keys_by_mini_bits(batches):
    """The `fine` histogram against a per-tuple count of the keys the real WindowJoin still holds (after expiry:
    time advances 30 ms per batch over a 100 ms window), over int and string keys and unkeyed streams."""
    join = WindowJoin(parse_spec(KEYED))
    for b, rows in enumerate(batches):
        chunk, seq = {}, 0
        for name in "RSABTU":
            mine = [(k, 30 * b + dt) for s, k, dt in rows if s == name]
            chunk[name] = Arrivals(
                _columns(name, [k for k, _ in mine], [t for _, t in mine]), np.arange(len(mine)) + seq
            )
            seq += len(mine)
        join.process(chunk)  # also expires what no later tuple can join
        held = [
            v for name, col in KEY.items() for blk in join.stores[name].blocks for v in blk.tuples.columns[col].tolist()
        ]
        report = GroupLoadMeter().report(_held({2: join}), total_seconds=0.0)
        assert report["fine"] == [_expected_fine(held, 6)]
        unkeyed = sum(len(blk) for name in "TU" for blk in join.stores[name].blocks)
        assert sum(report["fine"][0]) == report["window_tuples"][0] - unkeyed


@settings(max_examples=25, deadline=None)
@given(batches=KEYED_BATCHES)
def test_a_join_pooling_partitions_reports_each_as_its_own_join_would(batches):
    """`pooled_state` of one join holding every partition (each tuple's partition in a column) against
    `partition_state` of one join per partition fed the same tuples: tuples and mini-bit counts exactly, bytes
    within the rounding of a block's bytes shared by its tuples."""
    spec = parse_spec(KEYED)
    pooled, apart = WindowJoin(spec), {}
    for b, rows in enumerate(batches):
        for name in "RSABTU":
            mine = [(k, 30 * b + dt) for s, k, dt in rows if s == name]
            if not mine:
                continue
            columns = _columns(name, [k for k, _ in mine], [t for _, t in mine])
            key = KEY.get(name)
            parts = np.zeros(len(mine), np.int32) if key is None else partition_of(columns[key], 6)
            pooled.preload(name, {**columns, "@part": parts})
            for part in np.unique(parts).tolist():
                rows_p = np.flatnonzero(parts == part)
                apart.setdefault(part, WindowJoin(spec)).preload(name, {c: v[rows_p] for c, v in columns.items()})
    got = pooled_state(pooled, "@part")
    want = {p: partition_state(j) for p, j in apart.items()}
    assert sorted(got) == sorted(want)
    for part, state in want.items():
        assert got[part].tuples == state.tuples
        assert got[part].fine.tolist() == state.fine.tolist()
        # the pooled blocks also hold the 4-byte partition column
        assert abs(got[part].bytes - state.bytes - 4 * state.tuples) <= 2 + state.bytes // 10
