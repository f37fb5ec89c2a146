"""The memory-adaptation planner and group statistics on hand-made measures: what is pushed, moved or forced."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.planner import (
    Cleanup,
    Move,
    Push,
    SlotMeasure,
    cleanup_while_memory_allows,
    disk_push,
    plan,
    relocation,
)
from windjoin.operators.spill.stats import GroupStats, push_order

CONFIG = MemoryAdaptationConfig(memory_bytes=1000, theta_m=0.9, push_fraction=0.3, theta_d=0.8, theta_f=2.0)


def groups(*specs: tuple[int, int, int, int]) -> dict[int, GroupStats]:
    """(part, size, outputs, last insertion ts) -> statistics (inserted bytes: the size)."""
    return {p: GroupStats(size, out, ts, inserted_bytes=size) for p, size, out, ts in specs}


def test_productivity_and_inactivity():
    g = GroupStats(size_bytes=10, outputs=4, last_insert_ts=50, inserted_bytes=100)
    assert g.productivity == 25 and g.inactivity(80) == 30
    assert GroupStats(inserted_bytes=10).productivity == math.inf  # no output: least productive of all
    assert GroupStats().inactivity(5) is None


def test_push_order_inactive_first_then_least_productive():
    stats = groups((0, 100, 100, 90), (1, 100, 1, 95), (2, 100, 10, 10), (3, 100, 0, 99), (4, 0, 0, 0))
    assert push_order(stats, 100, theta_t_ms=50) == [2, 3, 1, 0]  # 2 idle 90 ms; empty group 4 not listed
    assert push_order(stats, 100, theta_t_ms=None, choose="most_productive") == [0, 2, 1, 3]


def test_disk_push_only_over_theta_m_and_about_push_fraction():
    slot = SlotMeasure(0, 850, 0, groups((0, 400, 40, 0), (1, 250, 1, 0), (2, 200, 100, 0)))
    assert disk_push(slot, CONFIG, 0) is None  # 850 <= 0.9 * 1000
    slot = SlotMeasure(0, 1000, 0, {**slot.groups, 3: GroupStats(150, 30, 0)})
    push = disk_push(slot, CONFIG, 0)
    assert push == Push(0, (1, 0))  # P_s/P_o 250, then 10: 650 bytes >= 0.3 * 1000


def test_relocation_moves_half_the_difference_of_productive_unpushed_groups():
    sender = SlotMeasure(0, 1000, 0, groups((0, 300, 300, 0), (1, 200, 400, 0), (2, 100, 1, 0), (3, 400, 0, 0)))
    sender.groups[1].disk_generations = 1  # pushed: never relocated
    receiver = SlotMeasure(1, 200, 0, groups((9, 200, 1, 0)))
    move = relocation([sender, receiver], CONFIG)
    assert move == Move(0, 1, (0, 2))  # 400 bytes may move: group 0 (P_s/P_o 1), then 2 (100) fits, 3 does not
    balanced = SlotMeasure(1, 850, 0, groups((9, 850, 1, 0)))
    assert relocation([sender, balanced], CONFIG) is None  # 0.85 >= theta_d


def test_lazy_disk_relocates_first_and_the_others_push():
    full = SlotMeasure(0, 1000, 0, groups((0, 400, 100, 0), (1, 600, 1, 0)))
    also_full = SlotMeasure(1, 950, 0, groups((2, 950, 10, 0)))
    light = SlotMeasure(2, 100, 0, groups((3, 100, 1, 0)))
    decisions = plan([full, also_full, light], CONFIG, 0)
    assert decisions == [Move(0, 2, (0,)), Push(1, (2,))]  # slot 0 relocates, so it does not push this round
    assert plan([full, also_full, light], CONFIG, 0, busy=frozenset({0, 2})) == [Push(1, (2,))]
    assert plan([full, also_full, light], CONFIG, 0, relocate=False) == [Push(0, (1,)), Push(1, (2,))]


def test_active_disk_forces_the_low_rate_slot_within_the_allowance():
    config = CONFIG.model_copy(update={"policy": "active_disk"})
    hot = SlotMeasure(0, 800, 400, groups((0, 400, 400, 0), (1, 400, 300, 0)))
    cold = SlotMeasure(1, 800, 20, groups((2, 300, 5, 0), (3, 500, 2, 0)))
    assert plan([hot, cold], CONFIG, 0, query_bytes=5000) == []  # lazy-disk: balanced and within budget
    assert plan([hot, cold], config, 0, query_bytes=5000) == [Push(1, (3,), forced=True)]
    assert plan([hot, cold], config, 0, query_bytes=2000) == []  # the query fits the cluster: nothing forced
    assert plan([hot, cold], config, 0, query_bytes=5000, forced_bytes=3000) == []  # allowance used up
    even = SlotMeasure(1, 800, 300, cold.groups)
    assert plan([hot, even], config, 0, query_bytes=5000) == []  # rates within theta_f


def test_config_errors_name_the_key():
    with pytest.raises(ValidationError, match="push_fraction"):
        MemoryAdaptationConfig(push_fraction=1.5)
    with pytest.raises(ValidationError, match="policy"):
        MemoryAdaptationConfig(policy="eager")


def test_active_disk_waits_for_memory_pressure_and_relocates_from_the_productive_slot():
    config = CONFIG.model_copy(update={"policy": "active_disk", "active_from": 0.9})
    hot = SlotMeasure(0, 800, 400, groups((0, 400, 400, 0), (1, 400, 300, 0)))
    cold = SlotMeasure(1, 800, 20, groups((2, 300, 5, 0), (3, 500, 2, 0)))
    assert plan([hot, cold], config, 0, query_bytes=5000) == []  # 800 < 0.9 * 1000: too early to force
    # After a forced push on slot 2, slots 0 and 1 are equally full: the productive one sends.
    config = config.model_copy(update={"active_from": 0.7})
    freed = SlotMeasure(2, 500, 10, groups((4, 500, 1, 0)))
    hot = SlotMeasure(0, 900, 400, groups((0, 150, 400, 0), (1, 750, 300, 0)))
    cold = SlotMeasure(1, 950, 20, groups((2, 200, 5, 0), (3, 750, 2, 0)))
    assert plan([hot, cold, freed], config, 0, query_bytes=5000)[0] == Move(0, 2, (0,))
    lazy = CONFIG
    assert plan([hot, cold, freed], lazy, 0)[0] == Move(1, 2, (2,))  # lazy-disk: the most used slot sends


def test_cleanup_while_memory_allows_most_productive_first_within_room():
    config = CONFIG.model_copy(update={"cleanup_below": 0.8})
    stats = groups((0, 100, 10, 0), (1, 100, 100, 0), (2, 100, 50, 0), (3, 100, 1, 0))
    for part, pushed in ((0, 200), (1, 300), (2, 250)):
        stats[part].disk_generations, stats[part].pushed_bytes = 1, pushed
    slot = SlotMeasure(0, 300, 0, stats)
    assert cleanup_while_memory_allows(slot, config) == Cleanup(0, (1, 0))  # room 500: 1 (300), 2 no, 0 (200)
    assert cleanup_while_memory_allows(slot, CONFIG) is None  # cleanup_below unset: only at the end
    assert plan([SlotMeasure(0, 950, 0, stats)], config, 0) == [Push(0, (3, 0, 2))]  # over theta_m: push, no clean-up
    assert plan([slot], config, 0) == [Cleanup(0, (1, 0))]
