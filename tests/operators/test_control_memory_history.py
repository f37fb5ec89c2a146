"""The controller's memory view from load reports: totals over batches, a replayed batch counted once."""

from __future__ import annotations

from windjoin.operators.control.load_entries import LoadEntry
from windjoin.operators.control.memory_history import MemoryHistory


def report(slot: int, groups: dict[int, tuple[int, int, int, int]], spill: dict | None = None) -> dict:
    """groups: partition -> (tuples_in, outputs, window_tuples, state_bytes)."""
    parts = sorted(groups)
    return {
        "slot": slot,
        "state_bytes": sum(groups[p][3] for p in parts),
        "window_tuples": sum(groups[p][2] for p in parts),
        "outputs": sum(groups[p][1] for p in parts),
        "groups": {
            "part": parts,
            "tuples_in": [groups[p][0] for p in parts],
            "outputs": [groups[p][1] for p in parts],
            "window_tuples": [groups[p][2] for p in parts],
            "state_bytes": [groups[p][3] for p in parts],
        },
        **({"spill": spill} if spill else {}),
    }


def test_outputs_and_inserted_bytes_add_up_over_batches_and_a_replay_counts_once():
    history = MemoryHistory()
    first = LoadEntry("1-0", 0, 10.0, 1.0, [report(0, {2: (10, 5, 10, 400)}), report(1, {3: (4, 0, 4, 80)})])
    second = LoadEntry("2-0", 1, 11.0, 1.0, [report(0, {2: (5, 7, 15, 600)}), report(1, {3: (0, 0, 4, 80)})])
    history.add([first, second])
    history.add([LoadEntry("3-0", 1, 12.0, 1.0, second.slots)])  # batch 1 replayed after a failure
    spill = {"spill_version": 3, "generations": {"5": 2}, "reload_bytes": {"5": 900}}
    history.add(
        [LoadEntry("4-0", 2, 13.0, 1.0, [report(0, {2: (0, 0, 15, 600)}), report(1, {3: (0, 0, 0, 0)}, spill)])]
    )
    view = history.view(slots=3)
    slot0, slot1, slot2 = view.slots
    p2 = slot0.groups[2]
    assert p2.outputs == 12  # 5 + 7, the replay not counted
    assert p2.inserted_bytes == 10 * 40 + 5 * 40  # tuples in times the partition's bytes per tuple (600/15)
    assert p2.size_bytes == 600 and p2.last_insert_ts == 11_000  # batch 2 gave it nothing
    assert slot0.used_bytes == 600
    assert slot1.groups[5].disk_generations == 2 and slot1.groups[5].pushed_bytes == 900
    assert slot1.groups[3].inserted_bytes == 4 * 20
    assert view.taken_version == 3 and view.now_ms == 13_000
    assert slot2.used_bytes == 0 and slot2.groups == {}  # never reported
