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
    assert announce.moves() == {Group(0): (0, 1), Group(3): (1, 2)} and announce.slots() == 3
    effective = next_epoch(announce, target)
    assert effective == ControlEpoch(target.routing, 0.25)
    assert next_epoch(effective, target) == effective  # steady: no batch is forced


def test_the_job_jumps_to_the_latest_decision_and_ignores_stale_ones():
    v1 = START.with_moves({Group(0): 1})
    v2 = v1.with_moves({Group(0): 0, Group(5): 0})  # p0 back where it started: only p5 moves from START
    announce = next_epoch(ControlEpoch(START), ControlTarget(v2, 0.0))
    assert announce.moves() == {Group(5): (1, 0)}
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
    store.put(4, 3, MovedGroup(rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))
    store.put(4, 3, MovedGroup(rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))  # a replay rewrites it whole
    got = store.get(4, 3)
    assert got.rows.equals(rows) and got.positions == {"max_ts": 2, "counts": {"R": 1, "S": 1}}
    store.prune(below_version=4)
    assert store.get(4, 3).rows.num_rows == 2
    store.prune(below_version=5)
    with pytest.raises(MissingStateError, match="partition 3 moved by routing version 4"):
        store.get(4, 3)
