"""The join job's input: the Kafka source with the input adapter applied inside the reader.

S2J puts the adapter where records enter. Running it in the reader's Python worker, rather than as a
`mapInArrow` stage after the source, spares every raw record a trip from that worker to the JVM and into
another Python worker: the stage reads, decodes, checks and routes in one pass and ships only join rows.
"""

from __future__ import annotations

import base64
import logging
import pickle
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from windjoin.connectors.files.batch_costs import BatchCosts
from windjoin.connectors.files.mark_reports import MarkReports
from windjoin.connectors.kafka.range_reader import read_ranges
from windjoin.connectors.kafka.source import KafkaDataSource, KafkaInputPartition, KafkaStreamReader
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.batch_size import next_batch_rows
from windjoin.operators.control.job_epoch import (
    ControlEpoch,
    ControlFeed,
    ControlTarget,
    check_spillable,
    next_epoch,
)
from windjoin.operators.event_time import (
    EventTime,
    EventTimeConfig,
    aligned_caps,
    first_event_time,
    next_event_time,
)
from windjoin.operators.offset_plan import KafkaRange
from windjoin.operators.spec_support import keeps_partitions_whole
from windjoin.pipelines.job.adapter import Adapter
from windjoin.pipelines.job.control_feed import REFUSALS_OPTION, DecisionFeed, RefusalCounts, auth_from_options
from windjoin.pipelines.job.slot_pieces import PIECE_SCHEMA, PieceBuffer

log = logging.getLogger(__name__)

ADAPTED_SOURCE_NAME = "windjoin_adapted_kafka"
ADAPTER_OPTION = "windjoin.adapter"  # the Adapter, pickled and base64-encoded (options are strings)
CONTROL_REDIS_OPTION = "windjoin.control.redis"  # Redis URL of the controller's decisions (none: static)
CONTROL_NAMESPACE_OPTION = "windjoin.control.namespace"
MARKS_OPTION = "windjoin.marks.path"  # folder of the batches' event-time marks (connectors.files.mark_reports)
COSTS_OPTION = "windjoin.costs.path"  # file of the recent batches' sizes and times (connectors.files.batch_costs)


def encode_adapter(adapter: Adapter) -> str:
    return base64.b64encode(pickle.dumps(adapter)).decode("ascii")


def decode_adapter(options: Any) -> Adapter:
    raw = options.get(ADAPTER_OPTION)
    if not raw:
        raise ValueError(f"option {ADAPTER_OPTION!r} is required: use read_adapted() to build this source")
    return pickle.loads(base64.b64decode(raw))  # noqa: S301 - written by read_adapted in this job's driver


class ControlledPartition(KafkaInputPartition):
    """The Kafka ranges of one read task with the batch's control epoch (JSON) and its event-time clock
    (`{"seq": n, "watermark": ms | None, "marks": {partition: ms} | None}`); the first task of a batch also
    yields the batch's control rows (`with_control`)."""

    def __init__(
        self, ranges: tuple[KafkaRange, ...], control: dict[str, Any], clock: dict[str, Any], with_control: bool
    ) -> None:
        InputPartition.__init__(self, (ranges, control, clock, with_control))
        self.ranges = ranges
        self.control = control
        self.clock = clock
        self.with_control = with_control


def event_time_config(spec: Any) -> EventTimeConfig | None:
    """The spec's event-time settings; None for a window kind without event time (count: nothing is late)."""
    if not spec.window.event_time:
        return None
    return EventTimeConfig(spec.allowed_lateness_ms, spec.idle_timeout_ms, spec.alignment_ms)


class AdaptedStreamReader(KafkaStreamReader):
    """The Kafka stream reader, yielding adapted join rows instead of raw records.

    Plans each batch's control epoch (operators.control.job_epoch) on the driver from the previous batch's and the
    controller's latest decision (`feed`; none: the adapter's routing forever, no shedding)."""

    def __init__(
        self,
        options: KafkaSourceOptions,
        adapter: Adapter,
        feed: ControlFeed | None = None,
        marks: MarkReports | None = None,
        costs: BatchCosts | None = None,
    ) -> None:
        super().__init__(options)
        self.adapter = adapter
        self.feed = feed
        self.marks = marks  # where the job reports each batch's marks (none: marks are never learnt)
        self.costs = costs  # where the job reports each batch's size and time (none: no latency target)
        self.event_time = event_time_config(adapter.spec)

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "feed": None}  # the feed is read on the driver only

    def next_control(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        current = ControlEpoch(self.adapter.routing) if previous is None else ControlEpoch.from_json(previous)
        if isinstance(self.feed, DecisionFeed):  # after a restart too, no decision may roll the routing back
            self.feed.at_least(current.routing.version, current.spill_version)
        epoch = next_epoch(current, self._decided())
        for table in (epoch.routing, epoch.pending):
            if table is not None:
                self.adapter.check_routing(table)  # on the driver: the query stops before any batch routes by it
        if epoch.spill or epoch.cleanup:
            check_spillable(self.adapter.spec)  # likewise before any batch pushes
        return epoch.to_json()

    def next_event_time(
        self, previous: dict[str, Any] | None, positions: dict[str, int], bounds: dict[str, tuple[int, int]]
    ) -> dict[str, Any] | None:
        if self.event_time is None:
            return None
        last = EventTime.from_json(previous) if previous is not None else first_event_time(positions)
        reported = self.marks.read(last.seq) if self.marks is not None and previous is not None else None
        now_ms = int(time.time() * 1000)
        return next_event_time(last, reported, positions, bounds, now_ms, self.event_time).to_json()

    def read_caps(
        self, event_time: dict[str, Any] | None, positions: dict[str, int], reads: dict[str, int]
    ) -> dict[str, int] | None:
        if self.event_time is None or event_time is None:
            return None
        # In a bounded run (Trigger.AvailableNow) a partition read to the end gets nothing more: it must not hold
        # the others back, or the run would stop before its end.
        done = (
            frozenset()
            if self._target is None
            else frozenset(key for key, (_, high) in self._target.items() if positions.get(key, high) >= high)
        )
        return aligned_caps(EventTime.from_json(event_time), positions, reads, self.event_time, done)

    def batch_limit(
        self, max_rows: int | None, positions: dict[str, int], bounds: dict[str, tuple[int, int]]
    ) -> int | None:
        """With a latency target, the record limit that keeps delays under it (operators.batch_size)."""
        target = self.adapter.spec.latency_target_ms
        if target is None or self.costs is None:
            return max_rows
        waiting = sum(max(0, high - positions.get(key, low)) for key, (low, high) in bounds.items())
        return next_batch_rows(target, self.costs.samples(), waiting, max_rows)

    def control_needs_batch(self, previous: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        """A routing step must run (its hand-over completes in the next batch), and so must a push or clean-up;
        a new shed ratio waits for records to shed (an empty batch would only dilute the next epoch's measured
        load)."""
        if (new or {}).get("spill") or (new or {}).get("cleanup"):
            return True  # a push or clean-up runs even when no record arrived
        other = {"shed_ratio", "spill", "cleanup", "spill_version"}
        routing = {k: v for k, v in (new or {}).items() if k not in other}
        return routing != {k: v for k, v in (previous or {}).items() if k not in other}

    def _decided(self) -> ControlTarget | None:
        if self.feed is None:
            return None
        try:
            return self.feed.latest()
        except Exception as exc:  # noqa: BLE001 - a controller outage must not stop the join: keep the epoch
            log.warning("cannot read the controller's decision (%s); keeping the current control epoch", exc)
            return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        control = end["control"]
        event_time = EventTime.from_json(end.get("event_time"))
        # the marks too once every input partition has one: a slot may then expire state by what it reads
        complete = event_time.ends and all(key in event_time.marks for key in event_time.ends)
        marks = event_time.marks if complete else None
        clock = {
            "seq": event_time.seq,
            "watermark": event_time.watermark,
            "marks": marks,
            "limit": end.get("limit"),
            "waiting": end.get("waiting"),
        }
        groups = [p.ranges for p in super().partitions(start, end)] or [()]
        return [ControlledPartition(g, control, clock, i == 0) for i, g in enumerate(groups)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The task's adapted rows as Arrow IPC pieces per slot (`slot_pieces`), its timing row last."""
        assert isinstance(partition, ControlledPartition)
        epoch = ControlEpoch.from_json(partition.control)
        pieces = PieceBuffer(self.adapter.schema)
        if partition.with_control:
            yield from pieces.add(self.adapter.control_rows(epoch, partition.clock))
        if partition.ranges:
            timing = {"read_ms": 0.0, "adapt_ms": 0.0, "records": 0}
            records = read_ranges(self.options, partition.ranges)
            while True:
                started = time.perf_counter()
                batch = next(records, None)
                read = time.perf_counter()
                timing["read_ms"] += (read - started) * 1000
                if batch is None:
                    break
                packed = list(pieces.add(self.adapter.adapt(batch, epoch)))
                timing["adapt_ms"] += (time.perf_counter() - read) * 1000
                timing["records"] += batch.num_rows
                yield from packed
            yield from pieces.add(self.adapter.timing_row(timing))
        yield from pieces.flush()  # packing the last pieces is an IPC write: a copy, left out of the timing


def adapted_options(options: Any, adapter: Adapter) -> KafkaSourceOptions:
    """The reader's options: Spark's string options for the broker, the spec's own batch limit (an int, straight
    from the spec the adapter carries; Spark asks for it back as the default read limit)."""
    parsed = KafkaSourceOptions.from_options(options)
    return replace(parsed, max_offsets_per_trigger=adapter.spec.max_offsets_per_trigger or None)


class AdaptedKafkaSource(KafkaDataSource):
    """``format("windjoin_adapted_kafka")``: the Kafka source options plus ``windjoin.adapter``."""

    @classmethod
    def name(cls) -> str:
        return ADAPTED_SOURCE_NAME

    def schema(self) -> Any:
        return from_arrow_schema(PIECE_SCHEMA)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        adapter = decode_adapter(self.options)
        feed_url = self.options.get(CONTROL_REDIS_OPTION)
        refusals = self.options.get(REFUSALS_OPTION)
        feed = (
            DecisionFeed(
                feed_url,
                self.options.get(CONTROL_NAMESPACE_OPTION, "windjoin"),
                partitions=adapter.spec.partitions,
                slots=len(adapter.slot_labels),
                auth=auth_from_options(self.options),
                refusals=RefusalCounts(refusals) if refusals else None,
                exact_pairs_only=keeps_partitions_whole(adapter.spec),
            )
            if feed_url
            else None
        )
        marks_path, costs_path = self.options.get(MARKS_OPTION), self.options.get(COSTS_OPTION)
        return AdaptedStreamReader(
            adapted_options(self.options, adapter),
            adapter,
            feed,
            MarkReports(marks_path) if marks_path else None,
            BatchCosts(costs_path) if costs_path else None,
        )


def read_adapted(spark: SparkSession, adapter: Adapter, options: dict[str, str]) -> DataFrame:
    """A streaming DataFrame of adapted rows (`adapter.schema`) from the topics of `adapter.spec`, packed in
    Arrow IPC pieces per slot (`slot_pieces.PIECE_SCHEMA`)."""
    spark.dataSource.register(AdaptedKafkaSource)
    topics = ",".join(s.topic for s in adapter.spec.streams.values() if s.topic)
    reader = spark.readStream.format(ADAPTED_SOURCE_NAME).option("topics", topics)
    for key, value in {**options, ADAPTER_OPTION: encode_adapter(adapter)}.items():
        reader = reader.option(key, value)
    return reader.load()
