"""Memory adaptation in the control epoch (paper 004 decided by the controller), on hand-made memory measures.

The expectations are worked out from the paper's rules by hand in each test (which slot is over theta_m, which
groups are least productive, what half the memory gap is), not read back from the planner.
"""

from __future__ import annotations

import pytest

from tests.support.control_epoch import epoch_load
from windjoin.operators.control.config import ControlConfigError, parse_control_config
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.memory import MemoryView, SpillRequest
from windjoin.operators.partitioning import Group
from windjoin.operators.spill.planner import SlotMeasure
from windjoin.operators.spill.stats import GroupStats

MB = 1 << 20
# capacity high and scaling pinned: no shedding or slot change; busy occupancy 0: no CPU reorganisation either
BASE = {"utilisation": {"capacity": 1e12, "min_workers": 2, "max_workers": 2}}


def config(**memory):
    return parse_control_config({**BASE, "memory": {"enabled": True, "memory_bytes": 100 * MB, **memory}})


def group(size_mb: float, outputs: int, inserted_mb: float, generations: int = 0, pushed_mb: float = 0):
    return GroupStats(
        size_bytes=int(size_mb * MB),
        outputs=outputs,
        inserted_bytes=int(inserted_mb * MB),
        disk_generations=generations,
        pushed_bytes=int(pushed_mb * MB),
    )


def view(slots: dict[int, dict[int, GroupStats]], taken: int = 0) -> MemoryView:
    measures = tuple(
        SlotMeasure(s, sum(g.size_bytes for g in groups.values()), 10, groups) for s, groups in sorted(slots.items())
    )
    return MemoryView(measures, taken, now_ms=1_000)


STATE = ControlState.initial(partitions=8, slots=2)  # round robin: slot 0 holds 0, 2, 4, 6; slot 1 holds 1, 3, 5, 7
QUIET = epoch_load(STATE, {0: 100, 1: 100}, {})


def balanced_overflow(**overrides):
    """Both slots at 95 MB of 100 (over theta_m = 0.9); productivity P_s/P_o ranks the groups."""
    slot0 = {0: group(30, 3000, 30), 2: group(25, 10, 25), 4: group(20, 100, 20), 6: group(20, 2000, 20)}
    slot1 = {1: group(30, 3000, 30), 3: group(25, 3000, 25), 5: group(20, 5, 20), 7: group(20, 2000, 20)}
    return view({0: {**slot0, **overrides}, 1: slot1})


def test_a_slot_over_its_budget_pushes_its_least_productive_groups_as_one_versioned_request():
    decision = control_step(STATE, QUIET, config(), memory=balanced_overflow())
    # each slot pushes 30% of 95 MB = 28.5 MB, largest MB/result first: slot 0 p2 (2.5, 25 MB) then p4 (0.2);
    # slot 1 p5 (4, 20 MB) then p1 (0.01, tied with p7: the larger goes first)
    assert decision.state.spill == SpillRequest(1, spill=(1, 2, 4, 5))
    assert decision.moves == ()


def test_choose_most_productive_is_the_papers_baseline_and_pushes_the_other_end():
    decision = control_step(STATE, QUIET, config(choose="most_productive"), memory=balanced_overflow())
    # smallest MB/result first: slot 0 p0 (0.01, tied with p6: the larger, 30 MB, covers 28.5 alone);
    # slot 1 p3 (0.008, 25 MB), then p1 (0.01)
    assert decision.state.spill == SpillRequest(1, spill=(0, 1, 3))


def test_an_untaken_request_is_kept_and_blocks_new_adaptations_and_moves_of_its_partitions():
    first = control_step(STATE, QUIET, config(), memory=balanced_overflow()).state
    busy = epoch_load(first, {0: 1000, 1: 0}, {0: 1.0, 1: 0.0})  # slot 0 a supplier, slot 1 a consumer
    state, moved = first, set()
    for _ in range(4):  # the job has not taken version 1
        again = control_step(state, busy, config(), memory=balanced_overflow())
        assert again.state.spill == first.spill  # recorded again, same version: the job takes it once
        moved |= {m.group.partition for m in again.moves}
        state = again.state
    assert moved == {0, 6}  # the reorganisation still runs, around the request's partitions
    light = view({0: {0: group(10, 10, 10), 6: group(10, 10, 10)}, 1: {7: group(10, 10, 10)}}, taken=1)
    taken = control_step(again.state, QUIET, config(), memory=light)
    assert taken.state.spill == first.spill  # taken, nothing new to decide: the last request stays recorded


def test_partitions_with_generations_on_disk_never_move():
    state = ControlState.initial(partitions=8, slots=2)
    # slot 0 is a supplier; all its groups but p4 have generations on disk, and memory is far from full
    disk = {p: group(1, 10, 1, generations=1, pushed_mb=1) for p in (0, 2, 6)}
    memory = view({0: {**disk, 4: group(1, 10, 1)}, 1: {p: group(1, 10, 1) for p in (1, 3, 5, 7)}})
    busy = epoch_load(state, {0: 1000, 1: 0}, {0: 1.0, 1: 0.0})
    for _ in range(3):
        decision = control_step(state, busy, config(), memory=memory)
        assert {m.group for m in decision.moves} <= {Group(4)}
        state = decision.state
    assert {p for p in (0, 2, 6) if state.routing.slot_of[p] != 0} == set()


def test_a_memory_gap_relocates_half_of_it_in_productive_groups_and_is_the_epochs_only_move():
    # slot 0 at 80 MB, slot 1 at 20 MB: 20/80 < theta_d 0.8; half the gap is 30 MB
    slot0 = {0: group(20, 10, 20), 2: group(20, 4000, 20), 4: group(20, 2000, 20), 6: group(20, 1, 20)}
    slot1 = {1: group(10, 10, 10), 3: group(10, 10, 10)}
    busy = epoch_load(STATE, {0: 0, 1: 1000}, {0: 0.0, 1: 1.0})  # CPU says: move off slot 1
    decision = control_step(STATE, busy, config(), memory=view({0: slot0, 1: slot1}))
    # the most productive first (p2: 0.005 MB/result), then p4 would make 40 MB > 30: only p2 fits
    assert [(m.group, m.source, m.target) for m in decision.moves] == [(Group(2), 0, 1)]
    assert decision.state.routing.slot_of[2] == 1
    assert decision.state.routing.version == STATE.routing.version + 1
    assert decision.state.spill is None


def test_clean_up_while_memory_allows_asks_for_the_pushed_groups_that_fit():
    slot0 = {0: group(10, 100, 10, generations=2, pushed_mb=30), 2: group(10, 10, 10, generations=1, pushed_mb=50)}
    slot1 = {1: group(10, 100, 10), 3: group(10, 100, 10)}
    decision = control_step(STATE, QUIET, config(cleanup_below=0.6), memory=view({0: slot0, 1: slot1}))
    # room below 60 MB of 100 with 20 MB used: 40 MB; p0 (more productive, 30 MB back) fits, p2 (50 MB) does not
    assert decision.state.spill == SpillRequest(1, cleanup=(0,))


def test_memory_needs_whole_partitions_and_active_disk_needs_a_query_bound():
    with pytest.raises(ControlConfigError, match=r"memory.enabled: cannot be combined with fine_tuning.enabled"):
        parse_control_config({"memory": {"enabled": True}, "fine_tuning": {"enabled": True}})
    with pytest.raises(ControlConfigError, match=r"memory.query_bytes: required with policy 'active_disk'"):
        parse_control_config({"memory": {"enabled": True, "policy": "active_disk"}})
    with pytest.raises(ControlConfigError, match=r"memory.cleanup_below: must be <= theta_m"):
        parse_control_config({"memory": {"enabled": True, "theta_m": 0.6, "cleanup_below": 0.9}})
