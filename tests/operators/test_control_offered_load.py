"""Utilisation counts the tuples offered to the join: an epoch that shed is not read as a light one."""

from __future__ import annotations

import pytest

from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch
from windjoin.operators.control.shedding import shed_ratio

CONFIG = parse_control_config(
    {
        "utilisation": {"tau0": 0.1, "tau_star": 0.3, "tau1": 0.6, "tau2": 1.0, "capacity": 1000},
        "reorganisation": {"th_sup": 0.99, "th_con": 0.0},
    }
)


def _epoch(joined_per_slot: int, batches: int = 3):
    reports = [SlotBatch(b, s, 1.0, Load(joined_per_slot, 0.1)) for b in range(batches) for s in range(2)]
    return aggregate_epoch(reports, slots=range(2))


def test_shed_records_count_as_offered_load_so_the_ratio_holds_while_the_burst_lasts():
    state = ControlState.initial(partitions=4, slots=2)
    burst = control_step(state, _epoch(900), CONFIG)  # tau 0.9: shed (0.9 - 0.6) / 0.4 = 0.75
    assert burst.tau == pytest.approx(0.9) and burst.state.shed_ratio == pytest.approx(0.75)
    # Next epoch, same offered load, 75% shed: 225 per slot and batch joined, 3 * 2 * 675 shed.
    held = control_step(burst.state, _epoch(225), CONFIG, shed=3 * 2 * 675)
    assert held.tau == pytest.approx(0.9) and held.state.shed_ratio == pytest.approx(0.75)
    # Without the shed records the same epoch would read tau 0.225 and stop shedding in mid-burst.
    assert control_step(burst.state, _epoch(225), CONFIG).state.shed_ratio == 0.0
    calm = control_step(held.state, _epoch(300), CONFIG)  # burst over: tau 0.3, nothing shed
    assert calm.state.shed_ratio == 0.0 == shed_ratio(calm.tau, 0.6)


def test_the_rate_measure_counts_tuples_per_second_so_slow_batches_do_not_raise_tau():
    config = parse_control_config(
        {
            "utilisation": {"tau0": 0.1, "tau_star": 0.3, "tau1": 0.6, "tau2": 1.0, "capacity": 500, "measure": "rate"},
            "reorganisation": {"th_sup": 0.99, "th_con": 0.0},
        }
    )
    state = ControlState.initial(partitions=4, slots=2)
    # 3 batches of 2 x 900 tuples over 6 s: 900 tuples/s per worker over 500 -> tau 0.9, whatever the batch count
    burst = control_step(state, _epoch(900), config, seconds=6.0)
    assert burst.tau == pytest.approx(0.9) and burst.state.shed_ratio == pytest.approx(0.75)
    held = control_step(burst.state, _epoch(225), config, shed=3 * 2 * 675, seconds=6.0)
    assert held.tau == pytest.approx(0.9)
    # the same tuples in batches that ran twice as long: half the rate
    assert control_step(state, _epoch(900), config, seconds=12.0).tau == pytest.approx(0.45)
    assert control_step(state, _epoch(900), config).tau == 0.0  # no span known: no rate


def test_the_arrivals_measure_reads_the_arrival_rate_whatever_the_job_took():
    config = parse_control_config(
        {
            "utilisation": {"tau1": 0.6, "tau2": 1.0, "tau_star": 0.3, "capacity": 500, "measure": "arrivals"},
            "reorganisation": {"th_sup": 0.99, "th_con": 0.0},
        }
    )
    state = ControlState.initial(partitions=4, slots=2)
    # the job took 900/s per worker (draining a backlog), but only 800 records/s arrived: tau 0.8, SR 0.5
    decision = control_step(state, _epoch(900), config, seconds=6.0, arrival_rate=800.0)
    assert decision.tau == pytest.approx(0.8) and decision.state.shed_ratio == pytest.approx(0.5)
    # no reading (the controller's first epoch without a reader): the rate the job took
    assert control_step(state, _epoch(900), config, seconds=6.0).tau == pytest.approx(0.9)
