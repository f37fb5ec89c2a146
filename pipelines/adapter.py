"""The input adapter (S2J): Kafka records to checked, projected, partitioned and routed join rows.

Runs on the executors over Arrow batches from the Kafka source. Every record yields exactly one row:
either a join row (stream, event time, the stream's declared fields, hash partition, slot) or a dead row
carrying the reason, so nothing is dropped silently. Rows have one column per (stream, field) so the
stateful join gets typed columns without decoding again. A punctuation record (the spec's
`sinks.parquet.snapshots.punctuation`: a valid record of that stream whose field equals the value) gets the
reason `punctuation`: it is neither joined nor dead-lettered, only counted, and closes a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from windjoin.connectors.codec import Codec
from windjoin.connectors.codec_errors import DecodeError
from windjoin.connectors.result_table import ARROW_TYPES
from windjoin.connectors.stream_codecs import stream_codecs
from windjoin.operators.partitioning import RoutingTable, partition_of
from windjoin.operators.schema import FUTURE_TIMESTAMP, RecordError, StreamSchema
from windjoin.operators.spec import JoinSpec

UNKNOWN_TOPIC = "unknown_topic"
PUNCTUATION = "punctuation"  # the reason of a punctuation row: counted, not joined, not a dead letter


def field_column(stream: str, field: str) -> str:
    return f"{stream}__{field}"


def adapter_schema(spec: JoinSpec) -> pa.Schema:
    """Columns of an adapted row: routing, provenance, dead-letter reason, then every stream's fields."""
    fields = [
        ("slot", pa.int32()),
        ("part", pa.int32()),
        ("stream", pa.string()),
        ("ts", pa.int64()),
        ("topic", pa.string()),
        ("kpartition", pa.int32()),
        ("koffset", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
    for name, s in spec.streams.items():
        fields += [(field_column(name, f), ARROW_TYPES[t]) for f, t in s.fields.items()]
    return pa.schema(fields)


@dataclass
class Adapter:
    """Picklable: built on the driver, shipped to the source readers on the executors."""

    spec: JoinSpec
    routing: RoutingTable
    slot_labels: tuple[int, ...]  # slot index -> grouping-key value that lands on its own Spark partition

    def __post_init__(self) -> None:
        self.schema = adapter_schema(self.spec)
        self.topics = {s.topic: name for name, s in self.spec.streams.items()}
        self.stream_schemas = {name: StreamSchema(s) for name, s in self.spec.streams.items()}
        self._codecs: dict[str, Codec] | None = None
        parquet = self.spec.sinks.parquet
        punct = parquet.snapshots.punctuation if parquet is not None else None
        # (stream, position of the field in a checked row, value) of the punctuation record, if any
        self.punctuation = (
            None
            if punct is None
            else (punct.stream, self.stream_schemas[punct.stream].columns.index(punct.field), punct.value)
        )

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "routing": self.routing, "slot_labels": self.slot_labels}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.adapt(batch)

    def adapt(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self._codecs is None:
            self._codecs = stream_codecs(self.spec)
        cols = batch.to_pydict()
        n = batch.num_rows
        stream_of = [self.topics.get(t) for t in cols["topic"]]
        out = {name: [None] * n for name in self.schema.names}
        out["topic"], out["kpartition"], out["koffset"] = cols["topic"], cols["partition"], cols["offset"]
        out["stream"] = stream_of
        schemas = self.stream_schemas
        accepted: dict[str, list[int]] = {name: [] for name in self.spec.streams}
        for i in range(n):
            stream = stream_of[i]
            try:
                if stream is None:
                    raise RecordError(UNKNOWN_TOPIC, f"topic {cols['topic'][i]!r} belongs to no stream")
                record = self._codecs[stream].decode(cols["value"][i])
                row = schemas[stream].check(record)
                self._check_not_future(row[0], cols["timestamp"][i])
            except (DecodeError, RecordError) as err:
                out["reason"][i] = err.reason
                out["detail"][i] = getattr(err, "detail", None) or str(err)
                continue
            out["ts"][i] = row[0]
            if self.punctuation is not None and self._is_punctuation(stream, row):
                out["reason"][i] = PUNCTUATION
                continue
            for name, value in zip(schemas[stream].columns[1:], row[1:], strict=True):
                out[field_column(stream, name)][i] = value
            accepted[stream].append(i)
        self._route(out, accepted, cols)
        return pa.RecordBatch.from_pydict(out, schema=self.schema)

    def _is_punctuation(self, stream: str, row: tuple | list) -> bool:
        punct_stream, position, value = self.punctuation
        if stream != punct_stream:
            return False
        found = row[position]
        return found == value and isinstance(found, bool) == isinstance(value, bool)

    def _check_not_future(self, event_ms: int, record_ms: int | None) -> None:
        limit = self.spec.max_future_ms
        if limit is not None and record_ms is not None and record_ms >= 0 and event_ms > record_ms + limit:
            raise RecordError(
                FUTURE_TIMESTAMP,
                f"event time {event_ms} is {event_ms - record_ms} ms ahead of the Kafka record time "
                f"{record_ms} (max_future_ms={limit})",
            )

    def _route(self, out: dict, accepted: dict[str, list[int]], cols: dict) -> None:
        """Partition and slot of each join row; dead rows go to the slot of their Kafka partition."""
        labels = np.asarray(self.slot_labels, dtype=np.int32)
        slots = len(self.slot_labels)
        for i, reason in enumerate(out["reason"]):
            if reason is not None:
                out["part"][i] = -1
                out["slot"][i] = int(labels[cols["partition"][i] % slots])
        for stream, rows in accepted.items():
            if not rows:
                continue
            key = self.spec.streams[stream].key
            if key is None:
                parts = np.zeros(len(rows), dtype=np.int32)
            else:
                column = out["ts"] if key == self.spec.streams[stream].timestamp else out[field_column(stream, key)]
                parts = partition_of(np.asarray([column[i] for i in rows]), self.spec.partitions)
            slot_labels = labels[self.routing.slots(parts)]
            for i, p, s in zip(rows, parts.tolist(), slot_labels.tolist(), strict=True):
                out["part"][i] = p
                out["slot"][i] = s
