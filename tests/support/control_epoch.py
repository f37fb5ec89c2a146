"""A control configuration and the epoch load of given per-slot tuples, for the pure control-epoch tests."""

from __future__ import annotations

from windjoin.operators.control.config import parse_control_config
from windjoin.operators.control.epoch import ControlState
from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch

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
