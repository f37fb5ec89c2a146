"""One control epoch end to end over the pure policies: shed ratio, slot count, drains and moves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch
from windjoin.operators.partitioning import Group

CONFIG = parse_control_config(
    {
        "utilisation": {"tau0": 0.2, "tau_star": 0.4, "tau1": 0.8, "tau2": 0.9, "capacity": 1000, "sustain_epochs": 2},
        "reorganisation": {"th_sup": 0.8, "th_con": 0.5},
        "shedding": {"base": 0.1},
    }
)


def epoch_load(state: ControlState, tuples_per_slot: dict[int, int], busy: dict[int, float]):
    """Two batches in which each slot takes the given tuples, spread evenly over its groups."""
    reports = []
    units = state.routing.groups()
    for batch in range(2):
        for slot, n in tuples_per_slot.items():
            mine = [g for g, s in units.items() if s == slot]
            groups = {g: Load(n // len(mine)) for g in mine} if mine else {}
            reports.append(SlotBatch(batch, slot, 1.0, Load(n, busy.get(slot, 0.0)), groups))
    return aggregate_epoch(reports, slots=range(state.slots))


def test_sustained_overload_sheds_then_grows():
    state = ControlState.initial(partitions=16, slots=2)
    load = epoch_load(state, {0: 950, 1: 950}, {0: 0.7, 1: 0.7})  # tau = 0.95
    first = control_step(state, load, CONFIG)
    assert first.tau == pytest.approx(0.95)
    assert first.state.shed_ratio == pytest.approx(0.1 + 0.9 / 0.2 * 0.15)
    assert first.state.slots == 2  # not yet sustained
    second = control_step(first.state, load, CONFIG)
    assert second.state.slots == 5  # ceil(2 * 0.95 / 0.4)
    assert second.state.routing.slot_of == state.routing.slot_of  # new slots start empty
    calm = control_step(second.state, epoch_load(second.state, {0: 300, 1: 300}, {}), CONFIG)
    assert calm.state.shed_ratio == 0.0


def test_sustained_underload_drains_the_released_slots():
    state = ControlState.initial(partitions=12, slots=4)
    load = epoch_load(state, {0: 100, 1: 100, 2: 50, 3: 50}, {})  # tau = 0.075 < tau0
    state = control_step(state, load, CONFIG).state
    decision = control_step(state, load, CONFIG)
    assert decision.state.slots == 1  # ceil(4 * 0.075 / 0.4)
    assert set(decision.state.routing.groups().values()) == {0}
    assert {(m.source, m.target) for m in decision.moves} == {(1, 0), (2, 0), (3, 0)}
    assert len(decision.moves) == 9


def test_no_shrink_while_a_released_slot_waits_for_state():
    state = ControlState.initial(partitions=12, slots=4)
    load = epoch_load(state, {0: 100, 1: 100, 2: 50, 3: 50}, {})
    state = control_step(state, load, CONFIG).state
    decision = control_step(state, load, CONFIG, in_flight={Group(3)})  # partition 3 is on slot 3
    assert decision.state.slots == 4


def test_reorganises_when_the_slot_count_stays():
    state = ControlState.initial(partitions=8, slots=2)
    load = epoch_load(state, {0: 500, 1: 100}, {0: 0.95, 1: 0.1})  # tau = 0.3: no scaling, no shedding
    decision = control_step(state, load, CONFIG)
    assert decision.state.slots == 2 and decision.state.shed_ratio == 0.0
    assert [(m.source, m.target) for m in decision.moves] == [(0, 1)]
    assert decision.state.routing.version == 1 and decision.state.epoch == 1


def test_declustering_mode_grows_by_one_with_a_supplier_and_no_consumer():
    config = CONFIG.model_copy(update={"scaling": "declustering"})
    state = ControlState.initial(partitions=8, slots=2)
    load = epoch_load(state, {0: 500, 1: 400}, {0: 0.95, 1: 0.6})
    assert control_step(state, load, config).state.slots == 3
    quiet = epoch_load(state, {0: 100, 1: 100}, {0: 0.6, 1: 0.3})
    assert control_step(state, quiet, config).state.slots == 1


def test_a_hot_slot_with_one_partition_spreads_it_when_allowed():
    state = ControlState.initial(partitions=4, slots=4)  # one partition per slot: slot 0 cannot yield one
    load = epoch_load(state, {0: 500, 1: 100, 2: 50, 3: 100}, {0: 0.95, 1: 0.2, 2: 0.1, 3: 0.3})
    assert control_step(state, load, CONFIG).hot == (0,)
    assert control_step(state, load, CONFIG).state.routing.spread == ()  # off by default
    spreading = CONFIG.model_copy(update={"hot": parse_control_config({"hot": {"spread": True}}).hot})
    decided = control_step(state, load, spreading).state.routing
    assert decided.spread == ((0, (0, 2)),)  # k = ceil(0.95 / th_con 0.5) = 2, with the least occupied slot
    again = control_step(replace(state, routing=decided), load, spreading).state.routing
    assert again.spread == decided.spread  # an already spread partition is left alone
