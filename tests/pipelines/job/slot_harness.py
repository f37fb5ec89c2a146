"""The slot's stateful join run in this process: its state in dicts (`tests.support.slot_state`), its pieces made by the
real adapter and packer, its results caught by an in-memory sink. Milliseconds a batch, no Spark."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from tests.support.slot_state import MemorySlotState
from windjoin.connectors.kafka.range_reader import ARROW_SCHEMA
from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job import join_state
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.join_state import JoinProcessor
from windjoin.pipelines.job.slot_output import SlotOutputs
from windjoin.pipelines.job.slot_pieces import PieceBuffer


class MemorySink:
    """Keeps what the slots stage, per batch and task."""

    name = "memory"

    def __init__(self) -> None:
        self.staged: dict[int, dict[str, list[pa.Table]]] = {}

    def stage(self, batch_id: int, piece: int, tables: Mapping[str, pa.Table]) -> dict[str, int]:
        batch = self.staged.setdefault(batch_id, {})
        for task, table in tables.items():
            batch.setdefault(task, []).append(table)
        return {task: t.num_rows for task, t in tables.items()}

    def commit(self, batch_id: int, pieces: Any, *, schemas: Any, batch_max: Any) -> list[str]:
        return list(pieces)

    def rows(self, task: str) -> list[dict[str, Any]]:
        return [row for batch in self.staged.values() for t in batch.get(task, []) for row in t.to_pylist()]


class SlotRun:
    """A job's slots fed batches of events, each batch adapted, packed and joined as the Spark job does it."""

    def __init__(self, spec: JoinSpec, monkeypatch: Any) -> None:
        self.spec = spec
        slot_labels = tuple(range(spec.slots))  # Spark's hash partitioner is not in the way here
        self.routing = RoutingTable.round_robin(spec.partitions, len(slot_labels))
        self.adapter = Adapter(spec, self.routing, slot_labels)
        self.sink = MemorySink()
        self.slots = {}
        for label in slot_labels:
            processor = JoinProcessor(spec, slot_labels, self.routing, outputs=SlotOutputs((self.sink,)))
            processor.open(MemorySlotState())
            self.slots[label] = processor
        self.batch_id = 0
        self.offsets: dict[str, int] = {}
        monkeypatch.setattr(join_state, "current_batch_id", lambda: self.batch_id)

    def pieces(self, events: Sequence[Mapping[str, Any]], watermark: int | None) -> pa.Table:
        """A batch of events (dicts naming their "stream") as the reader hands them to Spark: pieces per slot."""
        epoch = ControlEpoch(self.routing)
        clock = {"seq": self.batch_id, "watermark": watermark, "marks": None, "limit": None, "waiting": 0}
        pieces = PieceBuffer(self.adapter.schema)
        packed = list(pieces.add(self.adapter.control_rows(epoch, clock)))
        offsets = dict(self.offsets)
        for stream, records in _by_stream(events).items():
            packed += pieces.add(self.adapter.adapt(self._kafka_batch(stream, records, offsets), epoch))
        packed += pieces.flush()
        return pa.Table.from_batches(packed)

    def run(self, events: Sequence[Mapping[str, Any]], watermark: int | None) -> list[dict[str, Any]]:
        """Join one batch of events; the slots' summaries."""
        table = self.pieces(events, watermark)
        for stream, records in _by_stream(events).items():
            topic = self.spec.streams[stream].topic
            self.offsets[topic] = self.offsets.get(topic, 0) + len(records)
        self.sink.staged.pop(self.batch_id, None)  # a replay stages the batch anew
        stats = []
        for label, processor in self.slots.items():
            mine = table.filter(pa.compute.equal(table.column("slot"), label)).to_pandas()
            (out,) = processor.handleInputRows((label,), iter([mine]), None)
            stats.append(orjson.loads(out["stats"].iloc[0]))
        self.batch_id += 1
        return stats

    def save(self) -> Any:
        """The slots' state and positions, as Spark's checkpoint holds them after a committed batch."""
        return copy.deepcopy(([p.state.saved() for p in self.slots.values()], self.offsets, self.batch_id))

    def restore(self, saved: Any) -> None:
        """Roll the state back to `saved` (a batch failed after its slots ran; Spark runs it again)."""
        states, offsets, batch_id = copy.deepcopy(saved)
        for processor, state in zip(self.slots.values(), states, strict=True):
            processor.open(state)
        self.offsets, self.batch_id = offsets, batch_id

    def _kafka_batch(self, stream: str, records: list[Mapping[str, Any]], offsets: dict[str, int]) -> pa.RecordBatch:
        topic = self.spec.streams[stream].topic
        first = offsets.get(topic, 0)
        ts = self.spec.streams[stream].timestamp
        n = len(records)
        return pa.RecordBatch.from_pydict(
            {
                "topic": [topic] * n,
                "partition": [0] * n,
                "offset": list(range(first, first + n)),
                "key": [None] * n,
                "value": [orjson.dumps({k: v for k, v in r.items() if k != "stream"}) for r in records],
                "timestamp": [r[ts] for r in records],
            },
            schema=ARROW_SCHEMA,
        )


def _by_stream(events: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        out.setdefault(event["stream"], []).append(event)
    return out
