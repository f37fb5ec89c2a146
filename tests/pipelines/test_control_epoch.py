"""Control epochs planned batch by batch: a routing change is announced, then takes effect; shedding follows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from windjoin.connectors.move_store import MissingStateError, MovedGroup, MoveStore
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.pipelines.control_epoch import ControlEpoch, ControlTarget, next_epoch

START = RoutingTable.round_robin(8, 2)


def test_a_routing_change_is_announced_for_one_batch_then_effective():
    target = ControlTarget(START.with_moves({Group(0): 1, Group(3): 2}), 0.25)
    announce = next_epoch(ControlEpoch(START), target)
    assert announce.routing == START and announce.pending == target.routing and announce.shed_ratio == 0.25
    assert announce.changes() == {0: ((0,), (1,)), 3: ((1,), (2,))} and announce.slots() == 3
    effective = next_epoch(announce, target)
    assert effective == ControlEpoch(target.routing, 0.25)
    assert next_epoch(effective, target) == effective  # steady: no batch is forced


def test_the_job_jumps_to_the_latest_decision_and_ignores_stale_ones():
    v1 = START.with_moves({Group(0): 1})
    v2 = v1.with_moves({Group(0): 0, Group(5): 0})  # p0 back where it started: only p5 moves from START
    announce = next_epoch(ControlEpoch(START), ControlTarget(v2, 0.0))
    assert announce.changes() == {5: ((1,), (0,))}
    settled = next_epoch(announce, ControlTarget(v1, 0.0))  # an announced change completes whatever comes
    assert settled.routing == v2
    assert next_epoch(settled, ControlTarget(v1, 0.5)) == ControlEpoch(v2, 0.5)  # older routing: only the ratio
    assert next_epoch(settled, None) == settled  # no decision (or controller unreachable): keep everything


def test_epochs_round_trip_through_the_offset_json():
    epoch = ControlEpoch(START, 0.125, START.with_moves({Group(7): 0}))
    assert ControlEpoch.from_json(epoch.to_json()) == epoch
    with pytest.raises(ValueError, match="whole partitions"):
        ControlEpoch(
            START.with_units({Group(1, 1, 0): 1, Group(1, 1, 1): 0, **{Group(p): p % 2 for p in (0, *range(2, 8))}})
        ).to_json()


def test_the_move_store_keeps_a_group_until_pruned(tmp_path):
    store = MoveStore(str(tmp_path / "moves"))
    rows = pa.table({"part": pa.array([3, 3], pa.int32()), "stream": ["R", "S"], "ts": pa.array([1, 2], pa.int64())})
    store.put(4, 3, 1, MovedGroup(rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))
    store.put(4, 3, 1, MovedGroup(rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))  # a replay rewrites it whole
    store.put(4, 3, 0, MovedGroup(rows.slice(0, 0), {"max_ts": 5, "counts": {}}))  # another source's share
    store.put(4, 13, 0, MovedGroup(rows.slice(0, 0), {"max_ts": 9, "counts": {}}))  # p13 is not p1...
    got = store.get(4, 3)
    assert [g.positions["max_ts"] for g in got] == [5, 2] and got[1].rows.equals(rows)
    assert store.get_all(4, 1) == [] and store.get_all(3, 3) == []
    store.prune(below_version=4)
    assert len(store.get(4, 3)) == 2
    store.prune(below_version=5)
    with pytest.raises(MissingStateError, match="no state of partition 3 handed over at routing version 4"):
        store.get(4, 3)


def test_only_a_routing_step_forces_a_batch_without_new_records():
    from windjoin.pipelines.adapted_source import AdaptedStreamReader

    needs = AdaptedStreamReader.control_needs_batch
    steady = ControlEpoch(START).to_json()
    assert not needs(None, steady, ControlEpoch(START, shed_ratio=0.4).to_json())  # waits for records to shed
    announce = next_epoch(ControlEpoch(START), ControlTarget(START.with_moves({Group(0): 1}), 0.0))
    assert needs(None, steady, announce.to_json())
    assert needs(None, announce.to_json(), next_epoch(announce, None).to_json())  # the effective batch
