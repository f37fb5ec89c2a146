"""One control epoch end to end over the pure policies: shed ratio, slot count, drains and moves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.support.control_epoch import CONFIG, epoch_load
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.partitioning import Group


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
    # no supplier: it shrinks once that lasts declustering.shrink_after_epochs (3) epochs in a row
    slots = []
    for _ in range(4):
        decision = control_step(state, quiet, config)
        slots.append(decision.state.slots)
        state = decision.state
    assert slots == [2, 2, 1, 1]
    # a supplier in between starts the count again
    state = ControlState.initial(partitions=8, slots=2)
    busy = epoch_load(state, {0: 500, 1: 100}, {0: 0.95, 1: 0.6})  # a supplier, no consumer: grows
    for load, want in ((quiet, 2), (busy, 3)):
        state = control_step(state, load, config).state
        assert state.slots == want


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


FINE = CONFIG.model_copy(
    update={"fine_tuning": parse_control_config({"fine_tuning": {"enabled": True, "theta": 100}}).fine_tuning}
)
EVEN_300 = np.full(16, 300 / 16)  # window tuples of a partition by its 4 low mini bits: halves of 150 each


def test_fine_tuning_splits_a_hot_partition_and_moves_one_of_its_mini_groups():
    state = ControlState.initial(partitions=2, slots=2)  # one partition per slot: slot 0 has nothing to yield
    load = epoch_load(state, {0: 500, 1: 100}, {0: 0.95, 1: 0.1})
    fine = {0: EVEN_300, 1: np.full(16, 1.0)}
    assert control_step(state, load, CONFIG, fine=fine).hot == (0,)  # fine tuning off: a hot spot, no move
    decision = control_step(state, load, FINE, fine=fine)
    assert decision.retuned == (0,) and decision.hot == ()
    [move] = decision.moves
    assert move.group in (Group(0, 1, 0), Group(0, 1, 1)) and (move.source, move.target) == (0, 1)
    halves = {Group(0, 1, 0), Group(0, 1, 1)}
    assert decision.state.routing.groups() == {move.group: 1, (halves - {move.group}).pop(): 0, Group(1): 1}


def test_buddies_merge_back_below_theta_only_on_one_slot():
    state = ControlState.initial(partitions=2, slots=2)
    split = replace(state, routing=state.routing.with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 0, Group(1): 1}))
    calm = epoch_load(split, {0: 300, 1: 300}, {0: 0.6, 1: 0.6})  # neutral slots: nothing moves
    small = {0: np.full(16, 5.0)}  # 80 tuples: each half 40 < theta, together < 2 theta
    merged = control_step(split, calm, FINE, fine=small)
    assert merged.retuned == (0,) and merged.state.routing.groups() == {Group(0): 0, Group(1): 1}
    apart = replace(state, routing=state.routing.with_units({Group(0, 1, 0): 0, Group(0, 1, 1): 1, Group(1): 1}))
    kept = control_step(apart, epoch_load(apart, {0: 300, 1: 300}, {0: 0.6, 1: 0.6}), FINE, fine=small)
    assert kept.retuned == () and kept.state.routing == apart.routing
    assert control_step(split, calm, FINE, fine={}).state.routing == split.routing  # no histogram: as it was


def test_partitions_in_flight_or_spread_are_not_re_cut():
    state = ControlState.initial(partitions=4, slots=2)
    load = epoch_load(state, {0: 300, 1: 300}, {0: 0.6, 1: 0.6})
    fine = dict.fromkeys(range(4), EVEN_300)
    assert control_step(state, load, FINE, fine=fine).retuned == (0, 1, 2, 3)
    assert control_step(state, load, FINE, in_flight={Group(2)}, fine=fine).retuned == (0, 1, 3)
    spread = replace(state, routing=state.routing.with_spread(1, (1, 0)))
    assert control_step(spread, load, FINE, fine=fine).retuned == (0, 2, 3)
