"""Balancing by work (issue 22): groups weigh by their measured CPU, a partition too heavy for any slot is spread
by its work (and gathered back when it cools), and damping keeps a moved unit put for `hold_epochs` epochs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pytest

from windjoin.connectors.redis.control_decisions import encode_decision, state_from_fields
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch
from windjoin.operators.control.reorganise import Classes
from windjoin.operators.partitioning import Group, RoutingTable


def config(hold_epochs: int = 2, spread: bool = True, slots: int = 4):
    return parse_control_config(
        {
            "reorganisation": {
                "occupancy": "cpu",
                "pick": "balance",
                "th_sup": 1.2 / slots,  # 1.2 fair shares
                "th_con": 0.8 / slots,  # 0.8 fair shares
                "hold_epochs": hold_epochs,
            },
            "hot": {"spread": spread, "max_width": 4},
        }
    )


def epoch(state: ControlState, cpu: Mapping[int, float], tuples: Mapping[int, int] | None = None):
    """One batch in which each partition did `cpu` seconds of work (at every slot holding it, split evenly) and
    took `tuples` tuples (1 each by default): the tuples say nothing of the work."""
    groups: dict[int, dict[Group, Load]] = {s: {} for s in range(state.slots)}
    for p in range(state.routing.partitions):
        holders = state.routing.holders(p)
        for slot in holders:
            n = (tuples or {}).get(p, 1)
            groups[slot][Group(p)] = Load(tuples_in=n, cpu_s=cpu.get(p, 0.0) / len(holders))
    reports = [
        SlotBatch(0, s, 1.0, Load(sum(x.tuples_in for x in g.values()), cpu_s=sum(x.cpu_s for x in g.values())), g)
        for s, g in groups.items()
    ]
    return aggregate_epoch(reports, range(state.slots), kind="cpu")


def test_the_group_moved_is_the_one_whose_work_evens_the_pair_whatever_its_tuples():
    state = ControlState.initial(partitions=8, slots=4)  # slot s holds partitions s and s + 4
    # slot 0: p0 worked 1.5 s (one tuple), p4 1 s (1000 tuples); the rest 0.5 s each
    work = {0: 1.5, 4: 1.0, 1: 0.5, 5: 0.5, 2: 0.5, 6: 0.5, 3: 0.5, 7: 0.5}
    decision = control_step(state, epoch(state, work, tuples={0: 1, 4: 1000}), config())
    # shares of the work: slot 0 2.5/5.5 = 0.45, the others 0.18; p4 (0.18) is nearest half the gap (0.14), p0
    # (0.27) would leave the consumer as busy as the supplier. By tuples p4 would be nearly all of slot 0's load
    # (too heavy to move) and p0 nothing.
    assert [(m.group, m.source) for m in decision.moves] == [(Group(4), 0)]


def test_a_partition_whose_work_alone_is_over_th_sup_is_spread_by_its_work_not_moved():
    state = ControlState.initial(partitions=8, slots=4)
    work = {0: 6.0, 4: 0.5, 1: 0.5, 5: 0.5, 2: 0.5, 6: 0.5, 3: 0.5, 7: 0.5}  # p0: 6/9.5 = 0.63 of the work
    decision = control_step(state, epoch(state, work), config())
    assert decision.moves == () and decision.hot == (0,)
    # k = ceil(0.63 / th_con 0.2) = 4: its home slot first, then the least occupied others
    assert decision.state.routing.holders(0) == (0, 1, 2, 3)
    # without spreads it is reported hot and stays whole (moving it would only move the hot spot)
    unspread = control_step(state, epoch(state, work), config(spread=False))
    assert unspread.moves == () and unspread.hot == (0,) and unspread.state.routing.holders(0) == (0,)


def test_a_spread_partition_is_gathered_back_once_its_work_is_under_th_con():
    routing = RoutingTable.round_robin(8, 4).with_spread(0, (0, 1, 2))
    state = ControlState(5, routing, 4)
    hot = {0: 6.0, **{p: 0.5 for p in range(1, 8)}}
    assert control_step(state, epoch(state, hot), config()).state.routing.holders(0) == (0, 1, 2)
    cooled = {0: 0.2, **{p: 0.5 for p in range(1, 8)}}  # p0: 0.2 / 3.7 = 0.05 of the work, under th_con
    assert control_step(state, epoch(state, cooled), config()).state.routing.holders(0) == (0,)


def busy_config(hold_epochs: int):
    """Busy occupancy (a slot's seconds over the batch interval): slots' occupancies are independent."""
    reorganisation = {"occupancy": "busy", "pick": "balance", "th_sup": 0.8, "th_con": 0.5}
    return parse_control_config({"reorganisation": {**reorganisation, "hold_epochs": hold_epochs}})


def busy_epoch(state: ControlState, seconds: Mapping[int, float]):
    """One 1-second batch in which each partition kept its slot busy `seconds`."""
    groups: dict[int, dict[Group, Load]] = {s: {} for s in range(state.slots)}
    for g, slot in state.routing.groups().items():
        groups[slot][g] = Load(tuples_in=1, processing_s=seconds.get(g.partition, 0.0))
    reports = [
        SlotBatch(0, s, 1.0, Load(len(g), sum(x.processing_s for x in g.values())), g) for s, g in groups.items()
    ]
    return aggregate_epoch(reports, range(state.slots), kind="busy")


# p4 came to slot 1 in epoch 3 and made it a supplier (0.85 busy); p4 (0.55) is its best move to idle slot 3
MOVED = ControlState(3, RoutingTable(7, (0, 1, 2, 3, 1, 1, 2, 3)), 4, moved_at={Group(4): 3})
SECONDS = {0: 0.6, 1: 0.15, 5: 0.15, 4: 0.55, 2: 0.3, 6: 0.3}


def test_damping_keeps_a_moved_unit_put_until_its_slot_stays_a_supplier_hold_epochs_in_a_row():
    assert [m.group for m in control_step(MOVED, busy_epoch(MOVED, SECONDS), busy_config(0)).moves] == [Group(4)]
    held = control_step(MOVED, busy_epoch(MOVED, SECONDS), busy_config(2))
    assert held.held == (Group(4),) and Group(4) not in {m.group for m in held.moves}
    assert held.state.over_streak[1] == 1
    # slot 1 a supplier a second epoch in a row: the move overloaded it, p4 may go on
    state = replace(held.state, routing=MOVED.routing, slot_moved_at={})  # the unit's hold alone
    again = control_step(state, busy_epoch(state, SECONDS), busy_config(2))
    assert again.held == () and [m.group for m in again.moves] == [Group(4)]
    # the hold ends after hold_epochs epochs whatever the slot did
    late = replace(MOVED, epoch=5)
    assert control_step(late, busy_epoch(late, SECONDS), busy_config(2)).held == ()


def test_damping_keeps_the_slots_of_a_move_out_of_the_next_until_it_shows():
    # epoch 1 moved a unit from slot 0 to slot 3; epoch 2 still measures slot 0 over th_sup (the move takes two
    # batches): slot 0 yields nothing more, and slot 3 takes nothing more, until the move shows or the hold ends
    state = ControlState(1, RoutingTable(1, (0, 1, 2, 3, 0, 1, 2, 0)), 4, slot_moved_at={0: 1, 3: 1})
    seconds = {0: 0.5, 4: 0.3, 7: 0.1, 1: 0.3, 2: 0.6, 6: 0.1, 3: 0.1}  # slot 0: 0.9, slot 3: 0.1
    assert control_step(state, busy_epoch(state, seconds), busy_config(0)).moves  # undamped: yields again
    decision = control_step(state, busy_epoch(state, seconds), busy_config(2))
    assert decision.moves == ()
    # a slot over th_sup hold_epochs epochs in a row was not relieved: it yields again (to a slot not settling)
    streak = replace(state, over_streak={0: 1}, slot_moved_at={0: 1})
    assert [m.source for m in control_step(streak, busy_epoch(streak, seconds), busy_config(2)).moves] == [0]


def test_damping_state_survives_the_recorded_decision():
    decision = control_step(MOVED, busy_epoch(MOVED, SECONDS), busy_config(2))
    assert decision.state.moved_at and decision.state.over_streak
    fields = encode_decision(decision, {}, Classes((), (), ()), 1, 0, "1-0", 0.0)
    restored, _ = state_from_fields({k: str(v) for k, v in fields.items()})
    assert restored.moved_at == decision.state.moved_at and restored.over_streak == decision.state.over_streak
    assert restored.slot_moved_at == decision.state.slot_moved_at


@pytest.mark.parametrize("hold", [-1, "x"])
def test_hold_epochs_must_be_a_count(hold):
    with pytest.raises(ValueError, match="reorganisation.hold_epochs"):
        parse_control_config({"reorganisation": {"hold_epochs": hold}})


def test_mini_groups_weigh_by_their_join_work_where_reported():
    from windjoin.operators.control.finetune import FINE_DEPTH, unit_weights
    from windjoin.operators.control.load_entries import LoadEntry, fine_work

    routing = RoutingTable.round_robin(2, 2).with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 1, Group(1): 1})
    window = [10] * (1 << FINE_DEPTH)  # the same window tuples in every bin
    arrivals = [0] * (1 << FINE_DEPTH)
    arrivals[1] = 30  # all of partition 0's arrivals probe bin 1 (odd pattern: mini-group 0.1.1)
    report = {"slot": 0, "groups": {"part": [0], "fine": [window], "fine_in": [arrivals]}}
    entries = [LoadEntry("1-0", b, 0.0, 1.0, [report]) for b in (0, 1)]
    work = fine_work(entries)
    assert work[0][1] == 2 * 30 * 10 and work[0].sum() == 600  # two batches of 30 probes meeting 10 tuples
    by_tuples = unit_weights({Group(0): 1.0}, routing, {0: np.asarray(window)})
    by_work = unit_weights({Group(0): 1.0}, routing, work)
    assert by_tuples[Group(0, 1, 0)] == by_tuples[Group(0, 1, 1)] == 0.5
    assert (by_work[Group(0, 1, 0)], by_work[Group(0, 1, 1)]) == (0.0, 1.0)


def test_a_slot_holding_a_spread_share_does_not_make_its_own_partitions_look_too_heavy():
    # p0 is spread over slots 0 and 4: slot 4's occupancy holds half of p0's work beside its own p4 and p12. By
    # slot 4's occupancy split over p4 and p12 alone, p4 would look over th_sup (too heavy to move, never spread);
    # by its share of all the work it is an ordinary unit that evens slot 4 and the idlest slot
    routing = RoutingTable.round_robin(16, 8).with_spread(0, (0, 4))
    state = ControlState(3, routing, 8)
    work = {0: 1.4, 4: 0.6, 12: 0.05, **{p: 0.25 for p in (1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15)}, 8: 0.0}
    # shares: slot 4 1.35 / 5.05 = 0.27 (a supplier over 0.15), p4 0.12 of all the work (not over th_sup); the
    # slots of two 0.25 partitions 0.099 (consumers under 0.1)
    decision = control_step(state, epoch(state, work), config(slots=8))
    assert decision.hot == ()
    assert [(m.group, m.source) for m in decision.moves] == [(Group(4), 4)]


def test_without_a_capacity_nothing_is_shed_and_the_slot_count_stays():
    # the default config measures no utilisation: a made-up capacity would shed every record of a busy job
    state = ControlState.initial(partitions=8, slots=4)
    busy = epoch(state, {p: 5.0 for p in range(8)}, tuples={p: 10**6 for p in range(8)})
    default = parse_control_config({})
    for _ in range(4):  # more epochs than utilisation.sustain_epochs
        state = control_step(state, busy, default).state
        assert (state.shed_ratio, state.slots) == (0.0, 4)
    measured = parse_control_config({"utilisation": {"capacity": 1000}})
    assert control_step(state, busy, measured).state.shed_ratio == 1.0
