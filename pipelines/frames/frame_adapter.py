"""The input adapter for users' DataFrames: their typed rows to the slots' adapted rows, packed in pieces per slot.

`join_stream` unions the user's streams into one DataFrame of the adapted layout's field columns (`frame_inputs`)
and maps each of its Arrow batches through `FrameAdapter` on the executors, as the Kafka reader maps records
through `pipelines.job.adapter.Adapter`: rows are checked as the Kafka path checks decoded records (a null, an int
beyond 2^53, a float not finite get the same reasons, as dead rows, never dropped), partitioned by their key's hash
and routed to their slot, then packed into Arrow IPC pieces (`slot_pieces`), so rows cross Spark's shuffle as a
few blobs, not one by one. Every task also sends each slot one control row, so every slot runs in every batch
(expiry, outer and as-of emission follow the watermark whether a slot got rows or not).

A DataFrame has no offsets: a row's `koffset` is a hash of its values (`frame_inputs.ROW_HASH`), which orders
rows of equal event time within a batch the same way on every replay (rows with equal hashes are equal rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.partitioning import RoutingTable
from windjoin.operators.schema import MAX_SAFE_INT, RecordError, StreamSchema
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.adapter import Adapter, Decoded, field_column
from windjoin.pipelines.job.slot_pieces import PieceBuffer

FRAME_PARTITION = 0  # a DataFrame stream counts as one input partition (its event time is Spark's watermark's)


@dataclass
class FrameAdapter:
    """Picklable: `mapInArrow`'s function, built on the driver."""

    spec: JoinSpec
    slot_labels: tuple[int, ...]

    def __post_init__(self) -> None:
        self.adapter = Adapter(
            self.spec, RoutingTable.round_robin(self.spec.partitions, self.spec.slots), self.slot_labels
        )
        self.epoch = ControlEpoch(self.adapter.routing)
        self.schemas = {name: StreamSchema(s) for name, s in self.spec.streams.items()}

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "slot_labels": self.slot_labels}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pieces = PieceBuffer(self.adapter.schema)
        yield from pieces.add(self.adapter.control_rows(self.epoch))
        for batch in batches:
            yield from pieces.add(self.adapt(batch))
        yield from pieces.flush()

    def adapt(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Adapted rows (`adapter_schema`) of one batch of the union: checked, partitioned and routed."""
        n = batch.num_rows
        stream = batch.column("stream")
        ts = batch.column("ts")
        fields = {
            c: batch.column(c) for s, sch in self.schemas.items() for c in (field_column(s, f) for f in sch.fields)
        }
        reason: list[str | None] = [None] * n
        detail: list[str | None] = [None] * n
        accepted = {}
        for name in self.spec.streams:
            rows = np.flatnonzero(pc.equal(stream, name).to_numpy(zero_copy_only=False))
            suspect = self._suspect(batch, name, rows)
            for i in rows[suspect].tolist():
                record = {
                    c: batch.column(_column(name, c, self.schemas[name]))[i].as_py() for c in self.schemas[name].columns
                }
                try:
                    self.schemas[name].check(record)
                except RecordError as err:
                    reason[i] = err.reason
                    detail[i] = f"{err} (record {orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()})"
            accepted[name] = np.asarray([i for i in rows.tolist() if reason[i] is None], dtype=np.int64)
        decoded = Decoded(ts, pa.array(reason, pa.string()), pa.array(detail, pa.string()), fields, accepted)
        kpartition = pa.array(np.full(n, FRAME_PARTITION, np.int32))
        part, slot = self.adapter.route(decoded, kpartition, self.epoch)
        joined = np.zeros(n, dtype=bool)
        for rows in accepted.values():
            joined[rows] = True
        columns = {
            "slot": pa.array(slot, pa.int32()),
            "part": pa.array(part, pa.int32()),
            "stream": stream,
            "ts": ts,
            "topic": stream,  # a stream is its own topic here: marks and arrival order go by it
            "kpartition": kpartition,
            "koffset": batch.column("koffset"),
            "reason": decoded.reason,
            "detail": decoded.detail,
            "stored": pa.array(joined, pa.bool_(), mask=~joined),
            **fields,
        }
        arrays = [columns[f.name].cast(f.type) for f in self.adapter.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.adapter.schema)

    def _suspect(self, batch: pa.RecordBatch, stream: str, rows: np.ndarray) -> np.ndarray:
        """Which of `stream`'s `rows` the record check must look at (a null, an int or time out of range, a float
        not finite); the check itself (`StreamSchema.check`) then gives the reason, as for a Kafka record."""
        bad = np.zeros(len(rows), dtype=bool)
        if not len(rows):
            return bad
        taken = pa.array(rows)
        ts = batch.column("ts").take(taken)
        bad |= ~pc.fill_null(pc.and_(pc.greater_equal(ts, 0), pc.less_equal(ts, MAX_SAFE_INT)), False).to_numpy(
            zero_copy_only=False
        )
        for name, ftype in self.spec.streams[stream].fields.items():
            values = batch.column(field_column(stream, name)).take(taken)
            ok = pc.is_valid(values)
            if ftype == "int":
                ok = pc.and_(ok, pc.less_equal(pc.abs(values), MAX_SAFE_INT))
            elif ftype == "float":
                ok = pc.and_(ok, pc.is_finite(values))
            bad |= ~pc.fill_null(ok, False).to_numpy(zero_copy_only=False)
        return bad


def _column(stream: str, column: str, schema: StreamSchema) -> str:
    """The union's column holding `stream`'s `column` (its timestamp is the shared `ts`)."""
    return "ts" if column == schema.timestamp else field_column(stream, column)
