"""The controller's arithmetic on reported numbers stays finite (issue 47): an interval of 1e-320 s made the
utilisation infinite and `math.ceil` raise OverflowError in `utilisation_step` on every restart; `hot_spread`
had the same ceiling over an occupancy."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from windjoin.operators.control.bounded import MAX_RATIO, ceil_within, ratio
from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.epoch_state import EpochDraft, EpochSeen
from windjoin.operators.control.load import EpochLoad, Load, SlotBatch, aggregate_epoch
from windjoin.operators.control.policies import hot_spread
from windjoin.operators.partitioning import Group


def test_a_denormal_interval_gives_a_finite_utilisation_and_a_decision():
    config = parse_control_config({"utilisation": {"capacity": 1000, "measure": "rate", "sustain_epochs": 1}})
    state = ControlState.initial(partitions=8, slots=2)
    load = aggregate_epoch([SlotBatch(0, 0, 1e-320, Load(tuples_in=5000, processing_s=0.5))], range(2))
    decision = control_step(state, load, config, seconds=1e-320)  # OverflowError before
    assert math.isfinite(decision.tau) and decision.tau <= 2 * MAX_RATIO
    assert decision.state.slots == 8  # grown as far as it goes: one slot per partition
    assert decision.state.shed_ratio == 1.0


@pytest.mark.parametrize("th_con", [0.5, 0.0])
def test_hot_spread_takes_an_infinite_occupancy_as_the_widest_spread(th_con):
    config = parse_control_config({"hot": {"spread": True, "max_width": 3}, "reorganisation": {"th_con": th_con}})
    state = ControlState.initial(partitions=8, slots=4)
    seen = EpochSeen(state, EpochLoad(1, {0: math.inf, 1: 0.0, 2: 0.0, 3: 0.0}, {}, {}, {}))
    draft = replace(EpochDraft.start(seen), hot=(0,), heavy=(Group(0),))
    spread = hot_spread(draft, seen, config)  # OverflowError before (ZeroDivisionError with th_con 0)
    assert len(spread.routing.holders(0)) == 3


@pytest.mark.parametrize(
    ("numerator", "denominator", "expected"),
    [(1.0, 1e-320, MAX_RATIO), (10**400, 2.0, MAX_RATIO), (1.0, 0.0, 0.0), (math.nan, 1.0, 0.0), (3.0, 2.0, 1.5)],
)
def test_ratio_is_finite_and_zero_when_nothing_was_measured(numerator, denominator, expected):
    assert ratio(numerator, denominator) == expected


def test_ceil_within_caps_infinities_and_refuses_nan():
    assert ceil_within(math.inf, 1, 64) == 64 and ceil_within(-math.inf, 1, 64) == 1 and ceil_within(2.1, 1, 64) == 3
    with pytest.raises(ValueError, match="NaN"):
        ceil_within(math.nan, 1, 64)
