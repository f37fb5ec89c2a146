"""The input adapter (S2J): Kafka records to checked, projected, partitioned and routed join rows.

Runs on the executors over Arrow batches from the Kafka source. Every record not shed yields exactly one row:
either a join row (stream, event time, the stream's declared fields, hash partition, slot) or a dead row
carrying the reason, so nothing is dropped silently. Rows have one column per (stream, field) so the
stateful join gets typed columns without decoding again. A punctuation record (the spec's
`sinks.parquet.snapshots.punctuation`: a valid record of that stream whose field equals the value) gets the
reason `punctuation`: it is neither joined nor dead-lettered, only counted, and closes a snapshot.

Load shedding (S2J) happens here too, at the batch's control epoch's ratio: valid join records only (dead
letters and punctuations are never shed), decided by a hash of (topic, partition, offset) so a replayed batch
sheds the same records. Shed records leave no row each: one summary row per stream counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.connectors.formats.codec import Codec
from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_codec import JsonCodec
from windjoin.connectors.formats.json_columns import decode_columns
from windjoin.connectors.formats.stream_codecs import stream_codecs
from windjoin.operators.control.hot import store_turns
from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.control.shedding import record_hash, shed_mask_of_hashes
from windjoin.operators.partitioning import RoutingTable, key_hash, partition_of_hash
from windjoin.operators.result_table import ARROW_TYPES
from windjoin.operators.schema import FUTURE_TIMESTAMP, RecordError, StreamSchema
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spec_support import refusals

UNKNOWN_TOPIC = "unknown_topic"
PUNCTUATION = "punctuation"  # the reason of a punctuation row: counted, not joined, not a dead letter
SHED = "shed"  # a summary row per stream and reader batch: `koffset` holds how many records were shed
CONTROL = "control"  # one row per slot and batch: `detail` holds the batch's control epoch (JSON)
TIMING = "timing"  # one row per read task, to the first slot: `detail` holds the task's read and adapt times


def field_column(stream: str, field: str) -> str:
    return f"{stream}__{field}"


def key_column(spec: JoinSpec, stream: str) -> str:
    """The adapted (and stored) column holding `stream`'s partitioning key; its hash routes the row."""
    s = spec.streams[stream]
    return "ts" if s.key == s.timestamp else field_column(stream, s.key)


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
        ("stored", pa.bool_()),  # join rows: stored at this slot (False: a spread partition's probe-only copy)
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

    def __call__(
        self, batches: Iterator[pa.RecordBatch], epoch: ControlEpoch | None = None
    ) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.adapt(batch, epoch)

    def check_routing(self, routing: RoutingTable) -> None:
        """Refuse mini-group routing where this job cannot cut a partition's window over slots exactly."""
        if not routing.split:
            return
        why = refusals(self.spec, "split").shape
        unkeyed = [name for name, s in self.spec.streams.items() if s.key is None]
        if unkeyed:
            why.append(f"stream(s) {unkeyed} have no key whose hash could choose a mini-group")
        if why:
            raise ValueError(
                f"routing version {routing.version} splits partitions into mini-groups, refused here: "
                + "; ".join(why)
                + " (turn fine_tuning off in the controller's config)"
            )

    def control_rows(self, epoch: ControlEpoch, clock: dict | None = None) -> pa.RecordBatch:
        """One control row per slot of the epoch, so every slot runs in every batch and learns the epoch and the
        batch's event-time clock (`{"seq": n, "watermark": ms | None}`, under the key "clock")."""
        slots = epoch.slots()
        detail = orjson.dumps({**epoch.to_json(), "clock": clock}).decode()
        rows = {name: [None] * slots for name in self.schema.names}
        rows["slot"] = [self.slot_labels[s] for s in range(slots)]
        rows["part"] = [-1] * slots
        rows["reason"] = [CONTROL] * slots
        rows["detail"] = [detail] * slots
        return pa.RecordBatch.from_pydict(rows, schema=self.schema)

    def timing_row(self, timing: dict[str, float]) -> pa.RecordBatch:
        """A read task's times (`{"read_ms", "adapt_ms", "records"}`) as one row to the first slot, which reports
        them with the batch's stats: the read stage's share of the time budget travels with the data."""
        rows = {name: [None] for name in self.schema.names}
        rows["slot"], rows["part"], rows["reason"] = [self.slot_labels[0]], [-1], [TIMING]
        rows["detail"] = [orjson.dumps(timing).decode()]
        return pa.RecordBatch.from_pydict(rows, schema=self.schema)

    def adapt(self, batch: pa.RecordBatch, epoch: ControlEpoch | None = None) -> pa.RecordBatch:
        """Adapted rows of one Kafka partition's records, routed and shed as `epoch` says (default: the
        adapter's own routing, no shedding). Columnar throughout: a batch of plain records costs a few Arrow
        calls, not a Python step per record."""
        epoch = epoch or ControlEpoch(self.routing)
        if self._codecs is None:
            self._codecs = stream_codecs(self.spec)
        n = batch.num_rows
        topics = batch.column("topic")
        stream = pc.take(pa.array(list(self.topics.values()) + [None], pa.string()), _topic_codes(topics, self.topics))
        decoded = self._decode_columns(batch, stream) or self._decode_records(batch, stream)
        hashes = _record_hashes(batch) if epoch.shed_ratio > 0 or epoch.routing.spread else None
        shed = self._shed(decoded.accepted, hashes, epoch.shed_ratio)
        accepted = np.zeros(n, dtype=bool)
        for rows in decoded.accepted.values():
            accepted[rows] = True
        part, slot = self.route(decoded, batch.column("partition"), epoch)
        columns = {
            "slot": pa.array(slot, pa.int32()),
            "part": pa.array(part, pa.int32()),
            "stream": stream,
            "ts": decoded.ts,
            "topic": topics,
            "kpartition": batch.column("partition"),
            "koffset": batch.column("offset"),
            "reason": decoded.reason,
            "detail": decoded.detail,
            "stored": pa.array(accepted, pa.bool_(), mask=~accepted),
            **decoded.fields,
        }
        arrays = [columns.get(f.name) for f in self.schema]
        arrays = [pa.nulls(n, f.type) if a is None else a for a, f in zip(arrays, self.schema, strict=True)]
        adapted = pa.Table.from_arrays(arrays, schema=self.schema)
        parts = [adapted]
        if shed:
            dropped = np.zeros(n, dtype=bool)
            for rows in shed.values():
                dropped[rows] = True
            parts = [adapted.filter(pa.array(~dropped))]
            counts = {s: len(rows) for s, rows in shed.items()}
            parts.append(pa.Table.from_batches([self._shed_summary(counts, batch, epoch)]))
            hashes = hashes[~dropped]
        if epoch.routing.spread:
            parts[0] = self._spread(parts[0], hashes, epoch)
        table = pa.concat_tables(parts).combine_chunks()
        return table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=self.schema)

    def _decode_records(self, batch: pa.RecordBatch, stream: pa.Array) -> Decoded:
        """Decode and check record by record: each bad one gets its own reason."""
        assert self._codecs is not None
        schemas = self.stream_schemas
        n = batch.num_rows
        topics, values = batch.column("topic").to_pylist(), batch.column("value").to_pylist()
        record_ms, stream_of = batch.column("timestamp").to_pylist(), stream.to_pylist()
        ts, reason, detail = [None] * n, [None] * n, [None] * n
        fields = {field_column(s, f): [None] * n for s, sch in schemas.items() for f in sch.columns[1:]}
        accepted: dict[str, list[int]] = {name: [] for name in self.spec.streams}
        for i in range(n):
            name = stream_of[i]
            try:
                if name is None:
                    raise RecordError(UNKNOWN_TOPIC, f"topic {topics[i]!r} belongs to no stream")
                row = schemas[name].check(self._codecs[name].decode(values[i]))
                self._check_not_future(row[0], record_ms[i])
            except (DecodeError, RecordError) as err:
                reason[i] = err.reason
                detail[i] = getattr(err, "detail", None) or str(err)
                continue
            ts[i] = row[0]
            if self.punctuation is not None and self._is_punctuation(name, row):
                reason[i] = PUNCTUATION
                continue
            for field, value in zip(schemas[name].columns[1:], row[1:], strict=True):
                fields[field_column(name, field)][i] = value
            accepted[name].append(i)
        types = {f.name: f.type for f in self.schema}
        return Decoded(
            ts=pa.array(ts, pa.int64()),
            reason=pa.array(reason, pa.string()),
            detail=pa.array(detail, pa.string()),
            fields={c: pa.array(v, types[c]) for c, v in fields.items()},
            accepted={s: np.asarray(rows, dtype=np.int64) for s, rows in accepted.items()},
        )

    def _decode_columns(self, batch: pa.RecordBatch, stream: pa.Array) -> Decoded | None:
        """Decode and check a batch of one JSON stream's records at once (connectors.formats.json_columns); None when
        any record needs `_decode_records` (bad, future, not JSON, or several streams)."""
        assert self._codecs is not None
        n = batch.num_rows
        name = stream[0].as_py() if n else None
        codec = self._codecs.get(name) if name is not None else None
        if not isinstance(codec, JsonCodec) or stream.null_count or pc.count_distinct(stream).as_py() != 1:
            return None
        schema = self.stream_schemas[name]
        columns = decode_columns(batch.column("value"), schema, codec.max_message_bytes)
        if columns is None:
            return None
        ts = columns[schema.timestamp]
        limit, record_ms = self.spec.max_future_ms, batch.column("timestamp").to_numpy(zero_copy_only=False)
        if limit is not None and ((record_ms >= 0) & (ts.to_numpy() > record_ms + limit)).any():
            return None
        fields = {field_column(name, f): columns[f] for f in schema.columns[1:]}
        reason = pa.nulls(n, pa.string())
        rows = np.arange(n, dtype=np.int64)
        if self.punctuation is not None and self.punctuation[0] == name:
            _, position, value = self.punctuation
            found = (ts if position == 0 else columns[schema.columns[position]]).to_pylist()
            marks = np.array([v == value and isinstance(v, bool) == isinstance(value, bool) for v in found], bool)
            if marks.any():  # as `_decode_records`: the reason and event time only
                mark = pa.array(marks)
                reason = pc.if_else(mark, pa.scalar(PUNCTUATION), reason)
                fields = {c: pc.if_else(mark, pa.scalar(None, a.type), a) for c, a in fields.items()}
                rows = rows[~marks]
        return Decoded(ts, reason, pa.nulls(n, pa.string()), fields, {name: rows})

    def _spread(self, adapted: pa.Table, hashes: np.ndarray, epoch: ControlEpoch) -> pa.Table:
        """Rows of a spread partition go to each of its slots: stored at the one chosen by the record's hash,
        probe-only at the others."""
        parts = adapted.column("part").to_numpy(zero_copy_only=False)
        spread = dict(epoch.routing.spread)
        hot = np.isin(parts, list(spread))
        if not hot.any():
            return adapted
        pieces = [adapted.filter(pa.array(~hot))]
        for part, slots in spread.items():
            rows = np.flatnonzero(parts == part)
            if not len(rows):
                continue
            chosen = store_turns(hashes[rows], len(slots))
            copy = adapted.take(pa.array(rows))
            slot_at, stored_at = copy.schema.get_field_index("slot"), copy.schema.get_field_index("stored")
            for j, slot in enumerate(slots):
                labels = pa.array(np.full(len(rows), self.slot_labels[slot]), pa.int32())
                copy_j = copy.set_column(slot_at, "slot", labels)
                pieces.append(copy_j.set_column(stored_at, "stored", pa.array(chosen == j)))
        return pa.concat_tables(pieces)

    def _shed(self, accepted: dict[str, np.ndarray], hashes: np.ndarray | None, ratio: float) -> dict[str, np.ndarray]:
        """Take the records to shed out of `accepted`: per stream, their row numbers. The decision is a pure
        function of (topic, partition, offset) and the epoch's ratio, so a replayed batch sheds the same."""
        if ratio <= 0 or hashes is None or not len(hashes):
            return {}
        mask = shed_mask_of_hashes(ratio, hashes)
        shed = {}
        for stream, rows in accepted.items():
            gone = mask[rows]
            if gone.any():
                shed[stream] = rows[gone]
                accepted[stream] = rows[~gone]
        return shed

    def _shed_summary(self, counts: dict[str, int], batch: pa.RecordBatch, epoch: ControlEpoch) -> pa.RecordBatch:
        rows = {name: [None] * len(counts) for name in self.schema.names}
        rows["slot"] = [self._dead_slot(batch.column("partition")[0].as_py(), epoch.slots())] * len(counts)
        rows["part"] = [-1] * len(counts)
        rows["stream"] = list(counts)
        rows["koffset"] = list(counts.values())
        rows["reason"] = [SHED] * len(counts)
        return pa.RecordBatch.from_pydict(rows, schema=self.schema)

    def _dead_slot(self, kpartition: int, slots: int) -> int:
        """The slot (label) taking rows that join nothing: spread over the epoch's `slots` by Kafka partition."""
        return self.slot_labels[kpartition % slots]

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

    def route(self, decoded: Decoded, kpartition: pa.Array, epoch: ControlEpoch) -> tuple[np.ndarray, np.ndarray]:
        """Partition and slot (label) of each row: a join row's by its key (a split partition's by its
        mini-group); rows that join nothing go to the slot of their Kafka partition."""
        labels = np.asarray(self.slot_labels, dtype=np.int32)
        slots = epoch.slots()  # once per batch: a flood of bad records must not cost a routing-table walk each
        part = np.full(len(kpartition), -1, dtype=np.int32)
        slot = labels[kpartition.to_numpy(zero_copy_only=False) % slots]
        for stream, rows in decoded.accepted.items():
            if not len(rows):
                continue
            if self.spec.streams[stream].key is None:
                part[rows] = 0
                slot[rows] = labels[epoch.routing.slots(np.zeros(len(rows), dtype=np.int32))]
            else:
                keys = decoded.fields[key_column(self.spec, stream)] if key_column(self.spec, stream) != "ts" else None
                column = decoded.ts if keys is None else keys
                hashes = key_hash(column.take(pa.array(rows)).to_numpy(zero_copy_only=False))
                part[rows] = partition_of_hash(hashes, self.spec.partitions)
                slot[rows] = labels[epoch.routing.route(hashes)]  # mini-groups of a split partition included
        return part, slot


@dataclass(frozen=True)
class Decoded:
    """A batch's records decoded and checked: columns in the adapted layout, and the rows to join per stream."""

    ts: pa.Array
    reason: pa.Array
    detail: pa.Array
    fields: dict[str, pa.Array]  # adapted field columns (field_column); a stream's missing ones are all null
    accepted: dict[str, np.ndarray]  # per stream, the rows to join (punctuations and refused rows are not)


def _topic_codes(topics: pa.Array, known: dict[str, str]) -> pa.Array:
    """Each record's position in `known`'s topics, or len(known) for a topic of no stream."""
    codes = pc.index_in(topics, value_set=pa.array(list(known), pa.string()))
    return pc.fill_null(codes, len(known))


def _record_hashes(batch: pa.RecordBatch) -> np.ndarray:
    """`record_hash` of every record: the replay-deterministic source of per-record choices."""
    offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    hashes = np.zeros(len(offsets), dtype=np.uint64)
    sources = pa.table({"topic": batch.column("topic"), "partition": batch.column("partition")})
    # the reader's batches hold one Kafka partition; tests may mix
    for source in sources.group_by(["topic", "partition"]).aggregate([]).to_pylist():
        topic, partition = source["topic"], source["partition"]
        rows = pc.and_(pc.equal(sources["topic"], topic), pc.equal(sources["partition"], partition))
        rows = rows.to_numpy(zero_copy_only=False)
        hashes[rows] = record_hash(topic, int(partition), offsets[rows])
    return hashes
