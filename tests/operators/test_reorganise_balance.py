"""The weight-aware pick of paper 000's reorganisation (`pick: balance`) next to the paper's random pick, and the
CPU-share occupancy it is meant to run on."""

from __future__ import annotations

import numpy as np
import pytest

from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch
from windjoin.operators.control.reorganise import pick_balancing, plan_reorganisation
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.workloads.b_model import BModel


def test_balance_yields_the_group_nearest_half_the_gap():
    groups = [Group(0), Group(1), Group(2)]
    weights = {Group(0): 0.05, Group(1): 0.22, Group(2): 0.4}
    # supplier 0.67, consumer 0.1: gap 0.57, half 0.285 -> 0.22 (0.4 would leave 0.5 vs 0.27, worse)
    assert pick_balancing(groups, weights, 0.67, 0.1) == Group(1)
    # nothing lighter than a gap of 0.04: moving any group leaves the consumer at least as busy
    assert pick_balancing(groups, weights, 0.3, 0.26) is None
    # an idle group narrows nothing: not picked, however near its weight to half the gap
    assert pick_balancing([Group(3), Group(2)], {Group(3): 0.0, Group(2): 0.4}, 0.3, 0.26) is None


def test_balance_plan_by_hand():
    table = RoutingTable.round_robin(6, 2)  # slot 0: 0, 2, 4; slot 1: 1, 3, 5
    weights = {Group(0): 60.0, Group(2): 30.0, Group(4): 10.0, Group(1): 5.0, Group(3): 5.0, Group(5): 5.0}
    # slot 0's occupancy 0.85 apportioned 0.51, 0.255, 0.085; gap 0.7, half 0.35 -> partition 2
    plan = plan_reorganisation(table, {0: 0.85, 1: 0.15}, 0.6, 0.4, epoch=0, pick="balance", weights=weights)
    assert [(m.group, m.source, m.target) for m in plan.moves] == [(Group(2), 0, 1)]
    with pytest.raises(ValueError, match="weights"):
        plan_reorganisation(table, {0: 0.85, 1: 0.15}, 0.6, 0.4, epoch=0, pick="balance")
    with pytest.raises(ValueError, match="pick must be one of"):
        plan_reorganisation(table, {0: 0.85, 1: 0.15}, 0.6, 0.4, epoch=0, pick="heaviest")  # type: ignore[arg-type]


def test_a_supplier_whose_heaviest_partition_weighs_the_gap_and_nothing_narrows_it_is_hot():
    # 8 slots, each with fixed work of its own beside its partitions': slot 4 holds p4, p12 and p8 (moved in earlier).
    # p8 weighs 0.13 of the work, under th_sup (0.15) but over the gap to the idlest consumer (0.2 - 0.09), and
    # slot 4's other partitions are idle: nothing narrows the gap, and moving p8 would leave slot 3 at 0.22, busier
    # than slot 4 was. Spreading it is what helps.
    table = RoutingTable.round_robin(16, 8).with_moves({Group(8): 4})
    occupancy = {0: 0.12, 1: 0.12, 2: 0.12, 3: 0.09, 4: 0.2, 5: 0.12, 6: 0.12, 7: 0.11}
    weights = {Group(p): 0.87 / 13 for p in range(16)} | {Group(8): 0.13, Group(4): 0.0, Group(12): 0.0}
    plan = plan_reorganisation(table, occupancy, 0.15, 0.1, epoch=0, pick="balance", weights=weights)
    assert plan.moves == () and plan.hot == (4,) and plan.heavy == (Group(8),)
    # the same with a partition of slot 4 that narrows the gap: it moves, nothing is hot
    weights[Group(12)] = 0.05
    plan = plan_reorganisation(table, occupancy, 0.15, 0.1, epoch=0, pick="balance", weights=weights)
    assert [(m.group, m.source, m.target) for m in plan.moves] == [(Group(12), 4, 3)] and plan.hot == ()


def settle(pick: str, weights: np.ndarray, slots: int, epochs: int) -> list[float]:
    """Slowest slot over the mean after each epoch, when a slot's occupancy is its share of the weights."""
    table = RoutingTable.round_robin(len(weights), slots)
    ratios = []
    for epoch in range(epochs):
        load = np.bincount(np.asarray(table.slot_of), weights=weights, minlength=slots)
        ratios.append(float(load.max() / load.mean()))
        occupancy = {s: float(load[s] / load.sum()) for s in range(slots)}
        by_group = {Group(p): float(w) for p, w in enumerate(weights)}
        plan = plan_reorganisation(table, occupancy, 1.2 / slots, 0.8 / slots, epoch, pick=pick, weights=by_group)
        table = plan.routing
    return ratios


def test_balance_evens_a_b_model_skew_in_a_few_epochs_where_random_picks_take_many():
    # b = 0.7 over 64 partitions, the busiest slot holding 0.7^3 of them (first splits lined up with 8 slots)
    mass = BModel(64, 0.7, seed=0).probabilities()
    position = np.arange(64)
    weights = np.zeros(64)
    weights[(position % 8) * 8 + position // 8] = mass
    balance = settle("balance", weights, 8, 6)
    random = settle("random", weights, 8, 6)
    assert balance[0] == pytest.approx(8 * 0.7**3)
    assert max(balance[3:]) < 1.25  # within 3 epochs, and it stays there
    assert random[3] > 1.5  # the paper's random pick is still far off after 3


def test_cpu_occupancy_is_each_slots_share_of_the_batchs_cpu_seconds():
    reports = [
        SlotBatch(1, 0, 1.0, Load(10, 0.9, cpu_s=0.3)),
        SlotBatch(1, 1, 1.0, Load(10, 0.1, cpu_s=0.1)),
        SlotBatch(2, 0, 1.0, Load(10, 0.5, cpu_s=0.2)),
        SlotBatch(2, 1, 1.0, Load(10, 0.5, cpu_s=0.2)),
    ]
    epoch = aggregate_epoch(reports, slots=[0, 1], kind="cpu")
    assert epoch.occupancy == pytest.approx({0: (0.75 + 0.5) / 2, 1: (0.25 + 0.5) / 2})
    assert epoch.slot_load[0].cpu_s == pytest.approx(0.5)
