"""A slot's state in dicts (`pipelines.job.slot_state.SlotState`), for running the slot without Spark; copied
whole to stand for what Spark's checkpoint holds after a committed batch. With stored-layout rows and a batch's
store, for the tests of the slot's rooms over it."""

from __future__ import annotations

import copy

import pyarrow as pa

from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.pipelines.job.adapter import field_column
from windjoin.pipelines.job.segment_store import SegmentStore
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.stored_rows import segment_schema


class MemorySlotState:
    """`SlotState` over a value and a dict."""

    def __init__(self) -> None:
        self.stored_meta: bytes | None = None
        self.segments: dict[int, bytes] = {}

    def meta(self) -> bytes | None:
        return self.stored_meta

    def set_meta(self, data: bytes) -> None:
        self.stored_meta = data

    def segment(self, seg_id: int) -> bytes:
        return self.segments[seg_id]

    def put_segment(self, seg_id: int, data: bytes) -> None:
        self.segments[seg_id] = data

    def drop_segment(self, seg_id: int) -> None:
        self.segments.pop(seg_id, None)

    def saved(self) -> MemorySlotState:
        """A copy, as a checkpoint keeps it."""
        return copy.deepcopy(self)


def keyed_spec(size_ms: int, partitions: int = 4) -> JoinSpec:
    """R(k, x) and S(k, a) keyed by k, joined on k over a time window of `size_ms`, one slot."""
    return parse_spec(
        {
            "window": {"kind": "time", "size_ms": size_ms},
            "streams": {
                "R": {"fields": {"k": "int", "x": "int"}, "topic": "r", "key": "k"},
                "S": {"fields": {"k": "int", "a": "int"}, "topic": "s", "key": "k"},
            },
            "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
            "partitions": partitions,
            "slots": 1,
        }
    )


def stored_rows(spec: JoinSpec, *tuples: tuple[int, str, int], key: int = 7) -> pa.Table:
    """Stored-layout rows (partition, stream, event time) of a spec whose streams have a `k` field: every tuple's
    `k` is `key`, its other fields its event time."""
    columns: dict[str, list] = {name: [] for name in segment_schema(spec).names}
    for part, stream, ts in tuples:
        columns["part"].append(part)
        columns["stream"].append(stream)
        columns["ts"].append(ts)
        for name, s in spec.streams.items():
            for f in s.fields:
                columns[field_column(name, f)].append(None if name != stream else key if f == "k" else ts)
    return pa.table(columns, schema=segment_schema(spec))


def store_batch(store: SegmentStore, meta: SlotMeta, rows: pa.Table) -> None:
    """As a batch does: count the arrivals, then append them as one segment."""
    for part, stream in zip(rows.column("part").to_pylist(), rows.column("stream").to_pylist(), strict=True):
        counts = meta.counts.setdefault(str(part), dict.fromkeys(store.spec.streams, 0))
        counts[stream] += 1
    store.append(meta, rows)
