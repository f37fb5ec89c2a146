"""A slot's disk push and clean-up (paper 004) over an in-memory `SlotState`, without Spark: a push moves a
partition's stored rows to a generation file, and the clean-up emits exactly the pairs across generations."""

from __future__ import annotations

import pytest

from tests.support.slot_state import MemorySlotState, keyed_spec, store_batch, stored_rows
from windjoin.connectors.files.spill_files import SpillFiles
from windjoin.pipelines.job.segment_store import SegmentStore
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.slot_spill import SlotSpill, SpillReport

SPEC = keyed_spec(1000)


def test_a_push_then_a_clean_up_emit_each_pair_across_generations_once(tmp_path):
    state, meta = MemorySlotState(), SlotMeta(nonce="n0", held={"1": [0], "2": [0]})
    store = SegmentStore(SPEC, state)
    spill = SlotSpill(SPEC, str(tmp_path), store)
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 100), (1, "S", 150), (2, "R", 120)))
    windows = store.windows(meta)

    pushed = SpillReport()
    spill.push(meta, windows, (1, 3), pushed)  # 3 is not held here: nothing to push of it
    assert pushed.pushed == [[1, 0]] and pushed.pushed_tuples == 2
    assert SpillFiles(str(tmp_path)).read_table(1, 0).column("ts").to_pylist() == [100, 150]
    assert {p: s.tuples for p, s in windows.held().items()} == {2: 1}  # forgotten in the window ...
    assert store.partition_rows(meta, 1).num_rows == 0  # ... and in state
    assert meta.spill["1"].gens == [0] and meta.spill["1"].span == [100, 150]

    store_batch(store, meta, stored_rows(SPEC, (1, "S", 180)))  # the memory-resident generation
    cleaned = SpillReport()
    pairs = spill.cleanup(meta, windows, (1,), cleaned)
    # R@100 met S@150 when they arrived; S@180 arrived after the push and met no pushed tuple: only that pair
    assert [(list(p.sides["R"]["ts"]), list(p.sides["S"]["ts"])) for p in pairs] == [([100], [180])]
    assert cleaned.cleaned == [1] and cleaned.cleanup_pairs == 1
    assert sorted(store.partition_rows(meta, 1).column("ts").to_pylist()) == [100, 150, 180]  # back in state
    assert meta.spill["1"].gens == [] and meta.spill["1"].retired == [0]
    assert SpillFiles(str(tmp_path)).files(1)  # kept until the clean-up's batch committed ...
    spill.forget_retired(meta)  # ... which the slot's next batch knows
    assert not SpillFiles(str(tmp_path)).files(1) and meta.spill["1"].retired == []


def test_a_push_without_a_spill_folder_is_refused():
    state, meta = MemorySlotState(), SlotMeta(nonce="n0", held={"1": [0]})
    store = SegmentStore(SPEC, state)
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 100)))
    with pytest.raises(RuntimeError, match="spill folder"):
        SlotSpill(SPEC, None, store).push(meta, store.windows(meta), (1,), SpillReport())
