"""Kafka streaming source for Spark: a PySpark Python Data Source (streaming reader) over confluent-kafka.

Spark's JVM Kafka connector cannot be used here, so this reader does its job in Python:

* one Spark input partition per Kafka partition that has records in the batch (topics from option `topics`,
  comma-separated), or with option ``read.tasks`` N the partitions' ranges dealt to at most N tasks (fewer
  tasks: less per-batch scheduling); a range ``[start, end)`` is read with an assigned consumer (no group,
  pooled per Python worker across batches), never asking ``consume()`` for more messages than remain in the
  range, and stopping exactly at `end`;
* offsets are JSON ``{"partitions": {"topic:partition": next_offset, ...}}``, plus whatever a subclass plans
  with each batch through the reader's hooks (`next_control`, `next_event_time`: the join job's
  pipelines/job/adapted_source), so a batch replayed after a crash carries exactly what it had the first time;
* ``maxOffsetsPerTrigger`` is honoured through Spark's admission control (``getDefaultReadLimit`` and
  ``latestOffset(start, limit)``, pyspark >= 4.2) and split max-min fairly over partitions;
* ``Trigger.AvailableNow`` works on every pyspark 4.x (``prepareForTriggerAvailableNow`` where Spark offers
  it, else Spark's own wrapper around ``latestOffset()``).

Usage::

    register_kafka_source(spark)
    df = (spark.readStream.format("windjoin_kafka")
          .option("bootstrap.servers", "127.0.0.1:9092").option("topics", "a,b")
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10000").load())

Rows: ``topic string, partition int, offset long, key binary, value binary, timestamp long`` (the record
timestamp in ms). Other options: ``kafka.<librdkafka setting>`` is passed to every consumer;
``read.timeout.ms`` (default 60000) bounds how long a range read may make no progress before failing;
``consume.batch.size`` (default 10000) is the largest ``consume()`` call and Arrow batch.

The offsets and batch planning are `operators.offset_plan`; reading a planned range from the broker is
`connectors.kafka.range_reader`; the options are `connectors.kafka.source_options`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from windjoin.connectors.kafka.range_reader import list_partitions, probe_partition_bounds, read_ranges
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.offset_plan import KafkaRange, group_ranges, make_offset, parse_offset, plan_end, plan_ranges

try:  # pyspark >= 4.2: admission control (read limits) and Trigger.AvailableNow hooks for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pyspark 4.0 / 4.1: Spark calls latestOffset() without arguments
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

SOURCE_NAME = "windjoin_kafka"
SCHEMA_DDL = "topic string, partition int, offset long, key binary, value binary, timestamp long"


# ---------------------------------------------------------------------------------------------------------
# Spark data source
# ---------------------------------------------------------------------------------------------------------


class KafkaInputPartition(InputPartition):
    """A Spark input partition: the `KafkaRange`s one task reads (picklable)."""

    def __init__(self, ranges: tuple[KafkaRange, ...]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


_StreamReaderBases: tuple[type, ...] = (DataSourceStreamReader,)
if SupportsTriggerAvailableNow is not None:
    _StreamReaderBases += (SupportsTriggerAvailableNow,)


class KafkaStreamReader(*_StreamReaderBases):  # type: ignore[misc]
    """Plans batches on the driver (offsets, ranges) and reads ranges on the executors."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None  # driver-side, created on first use, never pickled
        # Trigger.AvailableNow: the (low, high) bounds when it began; the query goes no further.
        self._target: dict[str, tuple[int, int]] | None = None
        self._last_end: dict[str, Any] | None = None  # the last offset returned (pyspark 4.0/4.1 path)
        self._warned_no_limit = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_consumer"] = None
        return state

    # -- driver side --------------------------------------------------------------------------------------

    def _driver_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                self.options.consumer_config(**{"fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 65536})
            )
        return self._consumer

    def _bounds(self) -> dict[str, tuple[int, int]]:
        consumer = self._driver_consumer()
        timeout = self.options.read_timeout_s
        return probe_partition_bounds(consumer, list_partitions(consumer, self.options.topics, timeout), timeout)

    def initialOffset(self) -> dict[str, Any]:
        pick = 0 if self.options.starting_offsets == "earliest" else 1
        bounds = self._bounds()
        positions = {key: bound[pick] for key, bound in bounds.items()}
        offset = make_offset(positions, self.next_control(None), self.next_event_time(None, positions, bounds))
        self._last_end = offset
        return offset

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._bounds()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The end offset of the next batch, or `start` itself when there is nothing new to read.

        pyspark >= 4.2 passes `start` and a read limit (``ReadMaxRows`` from `getDefaultReadLimit`, or
        ``ReadAllAvailable`` when the trigger wants everything). pyspark 4.0/4.1 call ``latestOffset()`` with
        no arguments: then the start is the last offset this reader returned, and no read limit applies,
        because Spark offers no admission control to Python sources there (a warning says so once). Right
        after a restart that start is unknown: every partition is then taken up to its end, so a partition
        created while the query was down is read from its end, not its beginning (4.0/4.1 only).
        """
        # Under Trigger.AvailableNow the bounds seen when it began are the limit (partitions created since
        # wait for a later run); otherwise the broker is asked again.
        bounds = self._target if self._target is not None else self._bounds()
        if start is None:
            if self.options.max_offsets_per_trigger is not None and not self._warned_no_limit:
                self._warned_no_limit = True
                log.warning(
                    "maxOffsetsPerTrigger is not applied: this pyspark calls latestOffset() without a read "
                    "limit (admission control for Python data sources needs pyspark >= 4.2)"
                )
            if self._last_end is None:
                end = {key: high for key, (_, high) in bounds.items()}
                offset = make_offset(end, self.next_control(None), self.next_event_time(None, end, bounds))
                self._last_end = offset
                return offset
            start, limit = self._last_end, None
        positions = parse_offset(start)
        event_time = self.next_event_time(start.get("event_time"), positions, bounds)
        max_rows = self.batch_limit(getattr(limit, "max_rows", None), positions, bounds)
        end = plan_end(positions, bounds, max_rows)  # unaligned: what each partition would read
        reads = {key: end[key] - positions[key] for key in positions if key in end}
        caps = self.read_caps(event_time, positions, reads)
        if caps is not None:
            end = plan_end(positions, bounds, max_rows, caps)
        control = self.next_control(start.get("control"))
        if end == positions and not self.control_needs_batch(start.get("control"), control):
            return start
        offset = make_offset(end, control, event_time)
        if max_rows is not None:
            offset["limit"] = max_rows  # the batch's record limit, as planned (shown by the job)
        # records the broker held beyond the batch when it was planned: the job's backlog (reported per slot)
        offset["waiting"] = sum(max(0, int(high) - end.get(key, int(high))) for key, (_, high) in bounds.items())
        self._last_end = offset
        return offset

    def next_control(self, previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """The control state of the next batch given the last one's (None before the first batch). This reader
        plans none; see pipelines/adapted_source."""
        return None

    def next_event_time(
        self, previous: dict[str, Any] | None, positions: dict[str, int], bounds: dict[str, tuple[int, int]]
    ) -> dict[str, Any] | None:
        """The event-time state of the next batch (operators.event_time) given the last one's (None before the
        first). This reader does not decode records, so it tracks none; see pipelines/adapted_source."""
        return None

    def read_caps(
        self, event_time: dict[str, Any] | None, positions: dict[str, int], reads: dict[str, int]
    ) -> dict[str, int] | None:
        """Per partition, the most records the next batch may read (event-time alignment), given what each would
        read without (`reads`); None: no caps."""
        return None

    def batch_limit(
        self, max_rows: int | None, positions: dict[str, int], bounds: dict[str, tuple[int, int]]
    ) -> int | None:
        """The next batch's record limit given Spark's (`maxOffsetsPerTrigger`); this reader keeps it."""
        return max_rows

    def control_needs_batch(self, previous: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        """Whether a new control state must run a batch even without new records."""
        return new != previous

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = plan_ranges(parse_offset(start), parse_offset(end))
        return [KafkaInputPartition(g) for g in group_ranges(ranges, self.options.read_tasks)]

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- executor side ------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        yield from read_ranges(self.options, partition.ranges)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("windjoin_kafka")``: see the module docstring for options and rows."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.from_options(self.options))


def register_kafka_source(spark: Any) -> None:
    """Make ``format("windjoin_kafka")`` available in `spark` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)
