"""A slot's segments over an in-memory `SlotState`, without Spark: what each batch stores, what a move cuts out
and what expiry drops, in the state and in the slot's meta alike."""

from __future__ import annotations

from tests.support.slot_state import MemorySlotState, keyed_spec, store_batch, stored_rows
from windjoin.operators.partitioning import Group
from windjoin.pipelines.job.segment_store import SegmentStore
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.stored_rows import from_ipc

SPEC = keyed_spec(1000)


def _store() -> tuple[MemorySlotState, SegmentStore, SlotMeta]:
    state = MemorySlotState()
    return state, SegmentStore(SPEC, state), SlotMeta(nonce="n0")


def test_each_batch_is_one_segment_described_per_partition():
    state, store, meta = _store()
    first = stored_rows(SPEC, (1, "R", 100), (2, "S", 150), (1, "S", 300))
    store_batch(store, meta, first)
    store_batch(store, meta, stored_rows(SPEC))  # a batch with nothing kept stores nothing
    store_batch(store, meta, stored_rows(SPEC, (2, "R", 900)))
    assert [s.id for s in meta.segments] == [0, 1] and meta.next_segment == 2
    assert sorted(state.segments) == [0, 1]
    assert from_ipc(state.segments[0]).equals(first)
    described = meta.segments[0]
    assert described.max_ts == {"1": 300, "2": 150} and described.min_ts == {"1": 100, "2": 150}
    assert described.ends == {"1": {"R": 1, "S": 1}, "2": {"S": 1}}  # arrivals through each stream's last tuple
    assert meta.segments[1].ends == {"2": {"R": 1}}


def test_a_partitions_rows_are_read_across_segments_in_order():
    _, store, meta = _store()
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 100), (2, "S", 150)))
    store_batch(store, meta, stored_rows(SPEC, (3, "R", 200)))
    store_batch(store, meta, stored_rows(SPEC, (2, "R", 250), (1, "S", 300)))
    assert store.partition_rows(meta, 2).column("ts").to_pylist() == [150, 250]
    assert store.partition_rows(meta, 0).num_rows == 0


def test_a_cut_takes_the_moved_rows_and_rewrites_or_drops_their_segments():
    state, store, meta = _store()
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 100), (2, "S", 150), (1, "S", 300)))  # mixed: rewritten
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 400)))  # only the moved partition: dropped
    store_batch(store, meta, stored_rows(SPEC, (3, "S", 500)))  # untouched
    untouched = state.segments[2]
    taken, rests = store.cut(meta, [Group(1)])
    assert [t.column("ts").to_pylist() for t in taken[Group(1)]] == [[100, 300], [400]]
    assert [r.column("ts").to_pylist() for r in rests] == [[150]]
    assert [s.id for s in meta.segments] == [0, 2] and sorted(state.segments) == [0, 2]
    assert from_ipc(state.segments[0]).column("ts").to_pylist() == [150] and state.segments[2] == untouched
    rewritten = meta.segments[0]
    assert rewritten.max_ts == rewritten.min_ts == {"2": 150} and rewritten.ends == {"2": {"S": 1}}


def test_expiry_drops_a_segment_once_all_its_tuples_are_older_than_the_watermark_less_the_history():
    history = SPEC.max_history_ms
    state, store, meta = _store()
    store_batch(store, meta, stored_rows(SPEC, (1, "R", 100), (2, "S", 1_000)))
    store_batch(store, meta, stored_rows(SPEC, (1, "S", 5_000)))
    windows = store.windows(meta)  # rebuilt from the segments, as a batch after a restart does
    assert {p: s.tuples for p, s in windows.held().items()} == {1: 2, 2: 1}
    store.expire(meta, windows, None)  # no watermark yet: nothing is known to be over
    store.expire(meta, windows, 1_000 + history)  # its newest tuple may still join
    assert [s.id for s in meta.segments] == [0, 1]
    store.expire(meta, windows, 1_000 + history + 1)
    assert [s.id for s in meta.segments] == [1] and sorted(state.segments) == [1]
    assert {p: s.tuples for p, s in store.windows(meta).held().items()} == {1: 1}  # what a later batch rebuilds
