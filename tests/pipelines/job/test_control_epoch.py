"""Control epochs planned batch by batch: a routing change is announced, then takes effect; shedding follows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from windjoin.connectors.redis.move_store import MissingStateError, MovedGroup, MoveStore
from windjoin.operators.control.job_epoch import ControlEpoch, ControlTarget, holder_changes, next_epoch, pieces
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spec import parse_spec
from windjoin.pipelines.job.adapter import Adapter

START = RoutingTable.round_robin(8, 2)


def test_a_routing_change_is_announced_for_one_batch_then_effective():
    target = ControlTarget(START.with_moves({Group(0): 1, Group(3): 2}), 0.25)
    announce = next_epoch(ControlEpoch(START), target)
    assert announce.routing == START and announce.pending == target.routing and announce.shed_ratio == 0.25
    assert announce.changes() == {Group(0): ((0,), (1,)), Group(3): ((1,), (2,))} and announce.slots() == 3
    effective = next_epoch(announce, target)
    assert effective == ControlEpoch(target.routing, 0.25)
    assert next_epoch(effective, target) == effective  # steady: no batch is forced


def test_the_job_jumps_to_the_latest_decision_and_ignores_stale_ones():
    v1 = START.with_moves({Group(0): 1})
    v2 = v1.with_moves({Group(0): 0, Group(5): 0})  # p0 back where it started: only p5 moves from START
    announce = next_epoch(ControlEpoch(START), ControlTarget(v2, 0.0))
    assert announce.changes() == {Group(5): ((1,), (0,))}
    settled = next_epoch(announce, ControlTarget(v1, 0.0))  # an announced change completes whatever comes
    assert settled.routing == v2
    assert next_epoch(settled, ControlTarget(v1, 0.5)) == ControlEpoch(v2, 0.5)  # older routing: only the ratio
    assert next_epoch(settled, None) == settled  # no decision (or controller unreachable): keep everything
    v3 = v2.with_moves({Group(5): 1})
    back = v3.with_moves({Group(5): 0})  # a newer table moving nothing (from v2) is adopted without hand-over
    assert next_epoch(ControlEpoch(v2), ControlTarget(back, 0.0)) == ControlEpoch(back)


def test_epochs_round_trip_through_the_offset_json():
    epoch = ControlEpoch(START, 0.125, START.with_moves({Group(7): 0}))
    assert ControlEpoch.from_json(epoch.to_json()) == epoch
    split = ControlEpoch(_split3(START, 1, 0, 2, 1), 0.5, START.with_spread(4, (0, 1)))
    assert ControlEpoch.from_json(split.to_json()) == split
    assert split.to_json()["routing"]["split"] == [[3, 2, 0, 1], [3, 2, 1, 0], [3, 2, 2, 2], [3, 2, 3, 1]]


def test_the_move_store_keeps_a_group_until_pruned(tmp_path):
    store = MoveStore(str(tmp_path / "moves"))
    rows = pa.table({"part": pa.array([3, 3], pa.int32()), "stream": ["R", "S"], "ts": pa.array([1, 2], pa.int64())})
    store.put(4, 1, MovedGroup(Group(3), rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))
    store.put(4, 1, MovedGroup(Group(3), rows, {"max_ts": 2, "counts": {"R": 1, "S": 1}}))  # a replay rewrites it
    store.put(4, 0, MovedGroup(Group(3), rows.slice(0, 0), {"max_ts": 5, "counts": {}}))  # another source's share
    store.put(4, 2, MovedGroup(Group(3, 2, 1), rows.slice(0, 1), {"max_ts": 7, "counts": {}}))  # a mini-group
    store.put(4, 0, MovedGroup(Group(13), rows.slice(0, 0), {"max_ts": 9, "counts": {}}))  # p13 is not p1...
    got = store.get_all(4, 3)
    assert [(g.group, g.positions["max_ts"]) for g in got] == [(Group(3), 5), (Group(3), 2), (Group(3, 2, 1), 7)]
    assert got[1].rows.equals(rows) and got[2].rows.equals(rows.slice(0, 1))
    assert store.get_all(4, 1) == [] and store.get_all(3, 3) == []
    store.prune(below_version=4)
    assert len(store.get_all(4, 3)) == 3
    store.prune(below_version=5)
    assert store.get_all(4, 3) == []
    with pytest.raises(MissingStateError, match=r"state of Group\(partition=3, depth=2, pattern=1\) was not"):
        raise store.missing(4, Group(3, 2, 1))


def test_the_move_store_reads_hand_overs_named_by_older_code(tmp_path):
    """A move in flight across an upgrade: files named `p3-d2-m1-s0.arrow` (before `Group.key`) are still found."""
    store = MoveStore(str(tmp_path / "moves"))
    rows = pa.table({"part": pa.array([3], pa.int32()), "stream": ["R"], "ts": pa.array([1], pa.int64())})
    store.put(4, 0, MovedGroup(Group(3, 2, 1), rows, {"max_ts": 7, "counts": {"R": 1}}))
    [written] = (tmp_path / "moves").rglob("*.arrow")
    written.rename(written.with_name("p3-d2-m1-s0.arrow"))
    [got] = store.get_all(4, 3)
    assert got.group == Group(3, 2, 1) and got.rows.equals(rows) and got.positions["max_ts"] == 7


def test_only_a_routing_step_forces_a_batch_without_new_records():
    from windjoin.pipelines.job.adapted_source import AdaptedStreamReader

    needs = AdaptedStreamReader.control_needs_batch
    steady = ControlEpoch(START).to_json()
    assert not needs(None, steady, ControlEpoch(START, shed_ratio=0.4).to_json())  # waits for records to shed
    announce = next_epoch(ControlEpoch(START), ControlTarget(START.with_moves({Group(0): 1}), 0.0))
    assert needs(None, steady, announce.to_json())
    assert needs(None, announce.to_json(), next_epoch(announce, None).to_json())  # the effective batch


def _split3(table: RoutingTable, *slots: int) -> RoutingTable:
    """`table` with partition 3 split into 4 mini-groups (depth 2) on `slots` (by pattern)."""
    units = {g: s for g, s in table.groups().items() if g.partition != 3}
    return table.with_units({**units, **{Group(3, 2, x): s for x, s in enumerate(slots)}})


def test_a_split_in_place_is_adopted_at_once_and_moves_only_the_mini_groups_that_leave():
    in_place = _split3(START, 1, 1, 1, 1)  # p3 is on slot 1: no tuple changes slot
    assert next_epoch(ControlEpoch(START), ControlTarget(in_place, 0.0)) == ControlEpoch(in_place)
    moved = _split3(START, 1, 0, 2, 1)
    announce = next_epoch(ControlEpoch(START), ControlTarget(moved, 0.0))
    assert announce.pending == moved and announce.slots() == 3
    away = _split3(START.with_moves({Group(3): 2}), 0, 1, 0, 1)  # p3's unused slot_of entry still says 2
    assert away.slot_of[3] == 2 and ControlEpoch(away).slots() == 2
    assert announce.changes() == {Group(3, 2, 1): ((1,), (0,)), Group(3, 2, 2): ((1,), (2,))}
    # merged back whole on slot 0 (gathering from slots 1 and 2): every mini-group is a piece on the move but
    # the one already there
    merged = moved.with_units({**{g: s for g, s in moved.groups().items() if g.partition != 3}, Group(3): 0})
    assert holder_changes(moved, merged) == {
        Group(3, 2, 0): ((1,), (0,)),
        Group(3, 2, 2): ((2,), (0,)),
        Group(3, 2, 3): ((1,), (0,)),
    }


def test_pieces_refine_a_spread_into_mini_groups():
    spread = START.with_spread(3, (1, 0))
    split = _split3(START, 1, 0, 0, 2)  # p3 leaves its spread and splits in one step
    assert holder_changes(spread, split) == {
        Group(3, 2, 0): ((1, 0), (1,)),
        Group(3, 2, 1): ((1, 0), (0,)),
        Group(3, 2, 2): ((1, 0), (0,)),
        Group(3, 2, 3): ((1, 0), (2,)),
    }
    assert pieces({Group(3): (1,)}, {Group(3, 1, 0): (1,), Group(3, 1, 1): (0,), Group(4): (0,)}) == {
        Group(3, 1, 0): ((1,), (1,)),
        Group(3, 1, 1): ((1,), (0,)),
    }


def test_a_split_partition_cannot_be_spread():
    split = _split3(START, 1, 0, 0, 1)
    both = RoutingTable(split.version, split.slot_of, split.split, ((3, (1, 0)),))
    with pytest.raises(ValueError, match=r"spreads split partition\(s\) \[3\]: a spread stores and probes a whole"):
        ControlEpoch(START, pending=both)


@pytest.mark.parametrize(
    ("window", "tasks", "why"),
    [
        ({"kind": "count", "size": 10}, 2, "a count window numbers every arrival"),
        ({"kind": "time", "size_ms": 10}, 3, r"n-way task\(s\) \['t'\] run MJoin"),
    ],
)
def test_the_job_refuses_mini_groups_for_count_windows_and_n_way_tasks(window, tasks, why):
    streams = {n: {"fields": {"k": "int"}, "key": "k", "topic": n.lower()} for n in "RST"[:tasks]}
    on = [{"op": "eq", "left": f"{a}.k", "right": f"{b}.k"} for a, b in zip("RS", "ST", strict=False)][: tasks - 1]
    spec = parse_spec({"window": window, "streams": streams, "tasks": [{"name": "t", "join": list(streams), "on": on}]})
    adapter = Adapter(spec, RoutingTable.round_robin(spec.partitions, 2), (0, 1, 2))
    adapter.check_routing(START)  # whole partitions: fine
    refused = f"routing version 1 splits partitions into mini-groups, refused here: {why}"
    with pytest.raises(ValueError, match=refused):
        adapter.check_routing(_split3(START, 1, 0, 0, 1))
    # the job's driver plans the batch that would announce it, and stops there
    from windjoin.connectors.kafka.source_options import KafkaSourceOptions
    from windjoin.pipelines.job.adapted_source import AdaptedStreamReader

    class Feed:
        def latest(self) -> ControlTarget:
            return ControlTarget(_split3(START, 1, 0, 0, 1), 0.0)

    options = KafkaSourceOptions.from_options({"bootstrap.servers": "127.0.0.1:1", "topics": "r"})
    reader = AdaptedStreamReader(options, Adapter(spec, START, (0, 1, 2)), Feed())
    with pytest.raises(ValueError, match=refused):
        reader.next_control(ControlEpoch(START).to_json())


def test_a_spill_request_is_taken_into_exactly_one_epoch():
    from windjoin.operators.control.memory import SpillRequest

    request = SpillRequest(1, spill=(1, 3), cleanup=(5,))
    taken = next_epoch(ControlEpoch(START), ControlTarget(START, 0.0, request))
    assert (taken.spill, taken.cleanup, taken.spill_version) == ((1, 3), (5,), 1)
    after = next_epoch(taken, ControlTarget(START, 0.0, request))  # the same request again: nothing more
    assert (after.spill, after.cleanup, after.spill_version) == ((), (), 1)
    assert next_epoch(after, None) == after
    newer = next_epoch(after, ControlTarget(START, 0.0, SpillRequest(2, cleanup=(1, 3))))
    assert (newer.spill, newer.cleanup, newer.spill_version) == ((), (1, 3), 2)
    assert ControlEpoch.from_json(newer.to_json()) == newer
    # offsets written before the fields existed still read (no push, no clean-up)
    old = {k: v for k, v in ControlEpoch(START).to_json().items() if k not in ("spill", "cleanup", "spill_version")}
    assert ControlEpoch.from_json(old) == ControlEpoch(START)


def test_a_spill_request_waits_for_a_routing_step_and_refuses_partitions_that_are_not_whole():
    from windjoin.operators.control.memory import SpillRequest

    moved = START.with_moves({Group(0): 1})
    target = ControlTarget(moved, 0.0, SpillRequest(1, spill=(2,)))
    announce = next_epoch(ControlEpoch(START), target)
    assert announce.pending == moved and announce.spill == () and announce.spill_version == 0
    effective = next_epoch(announce, target)
    assert effective.routing == moved and effective.spill == (2,) and effective.spill_version == 1
    with pytest.raises(ValueError, match=r"partition\(s\) \[0\].*moving"):
        ControlEpoch(START, pending=moved, spill=(0,))
    with pytest.raises(ValueError, match=r"partition\(s\) \[4\].*spread"):
        ControlEpoch(START.with_spread(4, (0, 1)), cleanup=(4,))
    with pytest.raises(ValueError, match="out of range"):
        ControlEpoch(START, spill=(8,))


def test_a_push_or_clean_up_forces_a_batch_once():
    from windjoin.pipelines.job.adapted_source import AdaptedStreamReader

    steady = ControlEpoch(START, spill_version=1).to_json()
    asked = ControlEpoch(START, spill=(1,), spill_version=2).to_json()
    done = ControlEpoch(START, spill_version=2).to_json()
    needs = AdaptedStreamReader.control_needs_batch
    assert needs(None, steady, asked) and not needs(None, asked, done) and not needs(None, steady, steady)


@pytest.mark.parametrize(
    ("window", "tasks", "why"),
    [
        ({"kind": "count", "size": 10}, 2, "a count window numbers every arrival"),
        ({"kind": "time", "size_ms": 10}, 3, r"n-way task\(s\) \['t'\]"),
    ],
)
def test_the_job_refuses_pushes_for_count_windows_and_n_way_tasks(window, tasks, why):
    from windjoin.connectors.kafka.source_options import KafkaSourceOptions
    from windjoin.operators.control.memory import SpillRequest
    from windjoin.pipelines.job.adapted_source import AdaptedStreamReader

    streams = {n: {"fields": {"k": "int"}, "key": "k", "topic": n.lower()} for n in "RST"[:tasks]}
    on = [{"op": "eq", "left": f"{a}.k", "right": f"{b}.k"} for a, b in zip("RS", "ST", strict=False)][: tasks - 1]
    spec = parse_spec({"window": window, "streams": streams, "tasks": [{"name": "t", "join": list(streams), "on": on}]})

    class Feed:
        def latest(self) -> ControlTarget:
            return ControlTarget(START, 0.0, SpillRequest(1, spill=(2,)))

    options = KafkaSourceOptions.from_options({"bootstrap.servers": "127.0.0.1:1", "topics": "r"})
    reader = AdaptedStreamReader(options, Adapter(spec, START, (0, 1, 2)), Feed())
    with pytest.raises(ValueError, match=f"spill/cleanup: disk pushes are not supported for this spec: {why}"):
        reader.next_control(ControlEpoch(START).to_json())
