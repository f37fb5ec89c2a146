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

Broker quirks handled here (Tansu 0.6, measured): ListOffsets reports the base offset of the last record
batch + 1 as the end of a partition, short of the real end when the last produce request carried several
records, so partition ends are taken from a Fetch response's high watermark (`probe_partition_bounds`); a
fetch past the end of the log returns no records and no error (Kafka says OFFSET_OUT_OF_RANGE), so a range
read compares its position with that high watermark and fails within seconds when the log is too short.
Consuming an assigned partition of a deleted topic crashed the process inside librdkafka, so a range read
checks the metadata before it assigns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from windjoin.connectors.kafka_security import PLAINTEXT, KafkaSecurity

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
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
    ]
)
# How long a partition's log may be seen ending before a range's end until the read fails: the planned
# end was a high watermark seen earlier, so a shorter log means lost records, but a new leader's high
# watermark can lag for a moment.
EOF_GRACE_S = 5.0

# Librdkafka error codes meaning "this range can no longer be read", as opposed to transient trouble.
_FATAL_READ_CODES = {
    KafkaError.OFFSET_OUT_OF_RANGE,
    KafkaError._AUTO_OFFSET_RESET,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


class KafkaRangeError(RuntimeError):
    """A planned offset range cannot be read (data deleted, topic gone, broker short of the range)."""


# ---------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Validated source options (built once, from Spark's case-insensitive option map)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    read_timeout_s: float = 60.0
    consume_batch_size: int = 10_000
    read_tasks: int | None = None  # Spark tasks per batch (ranges grouped); None: one task per partition
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    security: KafkaSecurity = PLAINTEXT  # TLS / SASL (the password is read when a consumer is built)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError("option 'bootstrap.servers' is required (host:port[,host:port...])")
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        if not topics:
            raise ValueError(
                f"option 'topics' must name at least one topic (comma-separated), got {opts.get('topics')!r}"
            )
        starting = opts.get("startingoffsets", "latest").strip().lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(
                f"option 'startingOffsets' must be 'earliest' or 'latest', got {opts['startingoffsets']!r}"
            )
        max_offsets = None
        if opts.get("maxoffsetspertrigger"):
            max_offsets = _positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
        read_timeout_ms = _positive_int("read.timeout.ms", opts.get("read.timeout.ms", "60000"))
        batch_size = _positive_int("consume.batch.size", opts.get("consume.batch.size", "10000"))
        read_tasks = _positive_int("read.tasks", opts["read.tasks"]) if opts.get("read.tasks") else None
        kafka_config = {
            k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        secrets = [k for k in kafka_config if "password" in k or k.startswith("sasl.")]
        if secrets:
            raise ValueError(
                f"option(s) {['kafka.' + k for k in secrets]}: credentials go in the spec's kafka: section"
            )
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            starting_offsets=starting,
            max_offsets_per_trigger=max_offsets,
            read_timeout_s=read_timeout_ms / 1000.0,
            consume_batch_size=batch_size,
            read_tasks=read_tasks,
            kafka_config=kafka_config,
            security=KafkaSecurity.from_options(opts),
        )

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for an assign-only consumer (no group membership, no commits)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # Required by the client even though nothing subscribes or commits.
            "group.id": "windjoin-kafka-source",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # Out-of-range must be an error, never a silent jump to another offset.
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
        }
        config.update(self.kafka_config)
        config.update(self.security.client_config())
        config.update(overrides)
        return config


def _positive_int(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"option {key!r} must be a positive integer, got {raw!r}")
    return value


# ---------------------------------------------------------------------------------------------------------
# Offsets and planning (pure)
# ---------------------------------------------------------------------------------------------------------


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def make_offset(
    positions: Mapping[str, int],
    control: dict[str, Any] | None = None,
    event_time: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The offset dict Spark stores: positions in a canonical (sorted) key order (and, for a reader that plans
    with them, its control state and event time, operators.event_time)."""
    offset: dict[str, Any] = {"partitions": {k: int(positions[k]) for k in sorted(positions)}}
    if control is not None:
        offset["control"] = control
    if event_time is not None:
        offset["event_time"] = event_time
    return offset


def parse_offset(offset: Mapping[str, Any]) -> dict[str, int]:
    """The positions of an offset dict as made by `make_offset` (or read back from a checkpoint; one written
    before this version may carry an "epoch", which nothing reads)."""
    try:
        return {str(k): int(v) for k, v in offset["partitions"].items()}
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"not a windjoin Kafka offset (want {{'partitions': {{'topic:partition': n}}}}): {offset!r}"
        ) from exc


def fair_split(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """Share `limit` records among partitions max-min fairly: how many each may take from its `available`.

    Every partition gets an equal share, capped at what it has; what small partitions leave unused is shared
    again among the others. Records left by integer division go to the partitions with the largest remaining
    backlog (ties: key order), so a limit smaller than the partition count starves no partition for long.
    The result is deterministic and sums to ``min(limit, sum(available))``.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    wanting = {k: int(n) for k, n in available.items() if n > 0}
    grant = dict.fromkeys(available, 0)
    budget = limit
    while wanting and budget > 0:
        share = budget // len(wanting)
        if share == 0:
            break
        satisfied = {k: n for k, n in wanting.items() if n <= share}
        if satisfied:  # give the small ones all they want, re-share the rest
            for k, n in satisfied.items():
                grant[k] += n
                budget -= n
                del wanting[k]
            continue
        for k in wanting:
            grant[k] += share
            wanting[k] -= share
            budget -= share
    if wanting and budget > 0:  # fewer records left than partitions wanting: largest backlog first
        for k in sorted(wanting, key=lambda k: (-wanting[k], k))[:budget]:
            grant[k] += 1
    return grant


def plan_end(
    start: Mapping[str, int],
    bounds: Mapping[str, tuple[int, int]],
    limit: int | None,
    caps: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """End positions for the next batch, given each partition's (low, high) watermarks in `bounds`.

    A known partition advances towards its high watermark (never backwards), by at most its entry in `caps`
    (event-time alignment), all of them together by at most `limit` records (`fair_split`). A partition that
    is not in `start` (created since) enters at its low watermark without being read, so its start is recorded
    in an offset before any of it is read and a replay of the next batch reads the same records.
    """
    ends = dict(start)
    available: dict[str, int] = {}
    for key, (low, high) in bounds.items():
        if key in start:
            available[key] = max(0, int(high) - int(start[key]))
            if caps is not None and key in caps:
                available[key] = min(available[key], max(0, int(caps[key])))
        else:
            ends[key] = int(low)
    grant = available if limit is None else fair_split(available, limit)
    for key, n in grant.items():
        ends[key] = int(start[key]) + n
    return ends


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's records ``[start, end)`` for one batch."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


def plan_ranges(start: Mapping[str, int], end: Mapping[str, int]) -> list[KafkaRange]:
    """The non-empty ranges between two position maps, sorted by (topic, partition)."""
    ranges = []
    for key, hi in end.items():
        lo = start.get(key, hi)  # a partition new in `end` starts there (see `plan_end`)
        if hi < lo:
            raise ValueError(f"end offset {hi} is before start offset {lo} for {key}")
        if hi > lo:
            topic, partition = split_key(key)
            ranges.append(KafkaRange(topic, partition, int(lo), int(hi)))
    ranges.sort(key=lambda r: (r.topic, r.partition))
    return ranges


def group_ranges(ranges: Sequence[KafkaRange], tasks: int | None) -> list[tuple[KafkaRange, ...]]:
    """The ranges dealt to at most `tasks` read tasks, the largest first to the task with the fewest records
    (so the tasks end together), each task's ranges in (topic, partition) order; None: a task per range.

    Every task costs Spark a scheduling round and a Python worker hand-off (~0.1-0.3 s here), whatever it
    reads: a batch of a few thousand records over 8 partitions took 5 waves of tasks on 2 cores, one task per
    core reads it in one."""
    if tasks is None or tasks >= len(ranges):
        return [(r,) for r in ranges]
    loads = [0] * tasks
    groups: list[list[KafkaRange]] = [[] for _ in range(tasks)]
    for rng in sorted(ranges, key=lambda r: (-r.count, r.topic, r.partition)):
        lightest = loads.index(min(loads))
        groups[lightest].append(rng)
        loads[lightest] += rng.count
    return [tuple(sorted(g, key=lambda r: (r.topic, r.partition))) for g in groups if g]


# ---------------------------------------------------------------------------------------------------------
# Broker access
# ---------------------------------------------------------------------------------------------------------


def list_partitions(consumer: Consumer, topics: Sequence[str], timeout_s: float) -> list[tuple[str, int]]:
    """(topic, partition) for every partition of `topics`; a missing topic is an error naming it."""
    found = []
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            reason = meta.error if meta is not None and meta.error is not None else "no partitions"
            raise KafkaRangeError(f"Kafka topic {topic!r} is not available: {reason}")
        found.extend((topic, p) for p in sorted(meta.partitions))
    return found


def probe_partition_bounds(
    consumer: Consumer, partitions: Sequence[tuple[str, int]], timeout_s: float
) -> dict[str, tuple[int, int]]:
    """(low, high) watermarks per partition key, the high one taken from a Fetch response.

    ListOffsets alone is not trusted for the end: Tansu answers with the last record batch's base offset + 1.
    That answer is still a lower bound, so each partition is fetched from one before it (inside the last
    batch, i.e. a small fetch); the Fetch response carries the real high watermark, which librdkafka keeps as
    the cached watermark, and the partition-EOF event carries it too. The consumer is left unassigned.
    """
    if not partitions:
        return {}
    bounds: dict[str, tuple[int, int]] = {}
    assignment = []
    for topic, part in partitions:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=timeout_s, cached=False)
        except KafkaException as exc:
            raise KafkaRangeError(f"cannot list the offsets of {topic}:{part}: {exc}") from exc
        low, high = max(0, low), max(0, high)
        bounds[partition_key(topic, part)] = (low, max(low, high))
        assignment.append(TopicPartition(topic, part, max(low, high - 1)))
    pending = {partition_key(tp.topic, tp.partition) for tp in assignment}
    seen_end: dict[str, int] = {}
    consumer.assign(assignment)
    try:
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=max(1, len(pending)), timeout=0.2):
                key = partition_key(msg.topic(), msg.partition())
                err = msg.error()
                if err is None:
                    seen_end[key] = max(seen_end.get(key, 0), msg.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    seen_end[key] = max(seen_end.get(key, 0), msg.offset())
                elif err.code() in _FATAL_READ_CODES:
                    raise KafkaRangeError(f"cannot find the end of {key}: {err}")
                else:
                    log.warning("probing %s: %s", key, err)
                    continue
                pending.discard(key)
        if pending:
            raise KafkaRangeError(
                f"no Fetch response within {timeout_s:g} s for {sorted(pending)}: cannot find their end"
            )
        for topic, part in partitions:
            key = partition_key(topic, part)
            _, fetched_high = consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            low, listed_high = bounds[key]
            bounds[key] = (low, max(listed_high, fetched_high, seen_end[key]))
    finally:
        consumer.unassign()
    return bounds


_POOL: dict[str, list[Consumer]] = {}  # this Python worker's idle consumers, by configuration (`read_ranges`)


def read_ranges(options: KafkaSourceOptions, ranges: Sequence[KafkaRange]) -> Iterator[pa.RecordBatch]:
    """Yield the records of every range (`read_range`), the ranges read at once, each with a pooled consumer.

    Consumers are kept per worker process and configuration across batches, as Spark's own Kafka source pools
    its consumers: creating one, and its first metadata and fetch round trips, cost more than reading a small
    batch. The ranges of a task are read in threads (librdkafka waits outside the GIL), so a task's time is
    its slowest range's, not their sum. A worker runs one task at a time; a consumer that failed is closed.
    """
    # A reused consumer's next assignment waits out the fetch still in flight: keep that wait short (100 ms
    # made a pooled read of 2,500 records take 0.3 s, 10 ms and an unassign after each range 0.02 s on Tansu).
    config = options.consumer_config(**{"fetch.wait.max.ms": 10})
    key = repr(sorted(config.items()))
    idle = _POOL.setdefault(key, [])
    consumers = [idle.pop() if idle else Consumer(config) for _ in ranges]

    def read(rng: KafkaRange, consumer: Consumer) -> list[pa.RecordBatch]:
        batches = list(read_range(options, rng, consumer))
        consumer.unassign()
        return batches

    try:
        if len(ranges) == 1:
            yield from read(ranges[0], consumers[0])
        else:
            with ThreadPoolExecutor(len(ranges), thread_name_prefix="windjoin-read") as pool:
                for batches in pool.map(read, ranges, consumers):
                    yield from batches
    except BaseException:
        for consumer in consumers:
            consumer.close()
        raise
    idle += consumers


def read_range(
    options: KafkaSourceOptions, rng: KafkaRange, consumer: Consumer | None = None
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `rng` as Arrow batches (schema `ARROW_SCHEMA`), in offset order, exactly once.

    Raises KafkaRangeError when the range cannot be read: its start is below the partition's log start (data
    deleted by retention or a re-created topic), the topic or partition is gone, or the partition makes no
    progress towards `rng.end` for ``read.timeout.ms``.
    """
    own = consumer is None
    if consumer is None:
        consumer = Consumer(options.consumer_config(**{"fetch.wait.max.ms": 100}))
    where = f"{rng.topic}:{rng.partition} range [{rng.start}, {rng.end})"
    try:
        # Check that the partition exists before assigning it: consuming an assigned partition of a
        # deleted topic crashed the process (segfault inside librdkafka 2.16 against Tansu).
        meta = consumer.list_topics(rng.topic, timeout=options.read_timeout_s).topics.get(rng.topic)
        if meta is None or meta.error is not None or rng.partition not in meta.partitions:
            reason = meta.error if meta is not None and meta.error is not None else "no such partition"
            raise KafkaRangeError(f"cannot read {where}: the topic or partition does not exist ({reason})")
        try:
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(rng.topic, rng.partition), timeout=options.read_timeout_s, cached=False
            )
        except KafkaException as exc:
            raise KafkaRangeError(f"cannot read {where}: {exc}") from exc
        if low > rng.start:
            raise KafkaRangeError(
                f"cannot read {where}: records before offset {low} no longer exist (deleted by retention, or "
                f"the topic was deleted and re-created)"
            )
        tp = TopicPartition(rng.topic, rng.partition)
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        timestamps: list[int] = []
        last_progress = time.monotonic()
        short_since: float | None = None  # when the partition was first seen ending before rng.end
        while next_offset < rng.end:
            want = min(options.consume_batch_size - len(offsets), rng.end - next_offset)
            msgs = consumer.consume(num_messages=want, timeout=1.0)
            before = next_offset
            if (
                msgs
                and all(m.error() is None for m in msgs)
                and msgs[0].offset() >= next_offset
                and msgs[-1].offset() < rng.end
            ):  # the usual chunk: records only, all inside the range (offsets ascend within a partition)
                offsets += [m.offset() for m in msgs]
                keys += [m.key() for m in msgs]
                values += [m.value() for m in msgs]
                timestamps += [m.timestamp()[1] for m in msgs]
                next_offset = offsets[-1] + 1
                msgs = []
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= rng.end:  # only non-data records (e.g. txn markers) were left
                            next_offset = rng.end
                        continue
                    if err.code() in _FATAL_READ_CODES or err.fatal():
                        raise KafkaRangeError(f"cannot read {where} at offset {next_offset}: {err}")
                    log.warning("reading %s at offset %d: %s", where, next_offset, err)
                    continue
                offset = msg.offset()
                if offset < next_offset:
                    continue
                if offset >= rng.end:
                    next_offset = rng.end
                    break
                offsets.append(offset)
                keys.append(msg.key())
                values.append(msg.value())
                timestamps.append(msg.timestamp()[1])
                next_offset = offset + 1
            if next_offset > before:
                last_progress = time.monotonic()
                short_since = None
            if len(offsets) >= options.consume_batch_size:
                yield _to_batch(rng, offsets, keys, values, timestamps)
                offsets, keys, values, timestamps = [], [], [], []
            if next_offset < rng.end and last_progress < time.monotonic() - 0.5:
                # The latest Fetch response's high watermark: a log that ends before `rng.end` at or before
                # our position will not give the missing records (a fetch past the end is an error on Kafka,
                # but Tansu answers it with no records and no error, so this is checked here).
                _, high = consumer.get_watermark_offsets(tp, cached=True)
                if 0 <= high < rng.end and high <= next_offset:
                    short_since = short_since or time.monotonic()
                    if time.monotonic() - short_since > min(EOF_GRACE_S, options.read_timeout_s / 2):
                        raise KafkaRangeError(
                            f"cannot read {where}: the broker says the partition ends at offset {high}, the "
                            f"range was planned up to {rng.end} (topic deleted and re-created, or records "
                            f"lost on the broker)"
                        )
            if next_offset < rng.end and time.monotonic() - last_progress > options.read_timeout_s:
                raise KafkaRangeError(
                    f"cannot read {where}: no records after offset {next_offset - 1} for "
                    f"{options.read_timeout_s:g} s (read.timeout.ms); the partition is shorter than planned"
                )
        if offsets:
            yield _to_batch(rng, offsets, keys, values, timestamps)
    finally:
        if own:
            consumer.close()


def _to_batch(
    rng: KafkaRange,
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    timestamps: list[int],
) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(rng.topic, pa.string()), n),
            pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(timestamps, pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )


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
