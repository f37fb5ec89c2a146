"""Per-partition load reports of a slot: state bytes of real windows, seconds apportioned to add up."""

from __future__ import annotations

import numpy as np
import pytest

from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.slot_load import GROUP_FIELDS, GroupLoadMeter, join_state

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


def test_state_bytes_count_numeric_columns_exactly_and_strings_by_length():
    tuples, state = join_state(_filled(100, 50, "abcd"))
    assert tuples == 150
    # R: ts, k (8 bytes each) + name (8-byte reference + 4 characters); S: ts, k, v (8 bytes each)
    assert state == 100 * (8 + 8 + 8 + 4) + 50 * 24
    assert join_state(_filled(100, 50, "a" * 40))[1] - state == 100 * 36


def test_groups_seconds_add_up_to_the_slot_and_unfed_partitions_still_report_their_state():
    joins = {3: _filled(10, 10, "x"), 7: _filled(30, 0, "x"), 9: _filled(0, 5, "x")}
    meter = GroupLoadMeter()
    meter.record(3, 20, 4, 0.1)
    meter.record(7, 60, 0, 0.2)
    report = meter.report(joins, total_seconds=0.5)
    assert set(report) == set(GROUP_FIELDS)
    assert report["part"] == [3, 7, 9]
    assert report["tuples_in"] == [20, 60, 0]
    assert report["outputs"] == [4, 0, 0]
    assert report["window_tuples"] == [20, 30, 5]
    # the 0.2 s not measured per partition go by tuples in: 1/4 and 3/4
    assert report["seconds"] == pytest.approx([0.15, 0.35, 0.0])
    assert sum(report["seconds"]) == pytest.approx(0.5)


def test_an_idle_batch_spreads_its_seconds_evenly():
    report = GroupLoadMeter().report({1: _filled(1, 1, "x"), 2: _filled(1, 1, "x")}, total_seconds=0.4)
    assert report["seconds"] == pytest.approx([0.2, 0.2])
    assert GroupLoadMeter().report({}, 0.3) == dict.fromkeys(GROUP_FIELDS, [])
