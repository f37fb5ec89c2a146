"""Reading planned offset ranges from the broker with librdkafka: partitions, their bounds, and each range's
records as Arrow batches, exactly once.

Broker quirks handled here (Tansu 0.6, measured): ListOffsets reports the base offset of the last record
batch + 1 as the end of a partition, short of the real end when the last produce request carried several
records, so partition ends are taken from a read to the partition's end (`probe_partition_bounds`); a
fetch past the end of the log returns no records and no error (Kafka says OFFSET_OUT_OF_RANGE), so a range
read compares its position with that high watermark and fails within seconds when the log is too short.
Consuming an assigned partition of a deleted topic crashed the process inside librdkafka, so a range read
checks the metadata before it assigns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.offset_plan import KafkaRange, partition_key

log = logging.getLogger(__name__)

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


# Out-of-range answers: the log no longer holds the planned offsets (Apache Kafka says so; Tansu stays silent).
_OUT_OF_RANGE_CODES = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}


# Answers that pass: a leader being elected, a broker restarting (asked again until the call's deadline).
_TRANSIENT_CODES = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
}


class KafkaRangeError(RuntimeError):
    """A planned offset range cannot be read (data deleted, topic gone, broker short of the range)."""


def list_partitions(consumer: Consumer, topics: Sequence[str], timeout_s: float) -> list[tuple[str, int]]:
    """(topic, partition) for every partition of `topics`; a missing topic is an error naming it."""
    found = []
    deadline = time.monotonic() + timeout_s
    for topic in topics:
        meta = _topic_metadata(consumer, topic, deadline)
        if meta is None or meta.error is not None or not meta.partitions:
            reason = meta.error if meta is not None and meta.error is not None else "no partitions"
            raise KafkaRangeError(f"Kafka topic {topic!r} is not available: {reason}")
        found.extend((topic, p) for p in sorted(meta.partitions))
    return found


def probe_partition_bounds(
    consumer: Consumer, partitions: Sequence[tuple[str, int]], timeout_s: float
) -> dict[str, tuple[int, int]]:
    """(low, end) per partition key: `end` the offset up to which this consumer's isolation level may read.

    For a `read_committed` reader (the source's) that is the last stable offset: records of a transaction still
    open lie beyond it, and a range planned past it could not be read until the transaction ends (the high
    watermark, which librdkafka caches from Fetch responses, would be that wrong end). ListOffsets alone is not
    trusted either: Tansu answers with the last record batch's base offset + 1. That answer is still a lower
    bound, so each partition is read from one before it (inside the last batch, i.e. a small fetch) up to its
    partition-EOF event, whose offset is the end for this isolation level. The consumer is left unassigned.
    """
    if not partitions:
        return {}
    bounds: dict[str, tuple[int, int]] = {}
    assignment = []
    deadline = time.monotonic() + timeout_s
    for topic, part in partitions:
        low, high = _listed_offsets(consumer, TopicPartition(topic, part), deadline)
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
                    pending.discard(key)
                elif err.code() in _FATAL_READ_CODES:
                    raise KafkaRangeError(f"cannot find the end of {key}: {err}")
                else:
                    log.warning("probing %s: %s", key, err)
        if pending:
            raise KafkaRangeError(
                f"no Fetch response within {timeout_s:g} s for {sorted(pending)}: cannot find their end"
            )
        for key, (low, listed_end) in bounds.items():
            bounds[key] = (low, max(listed_end, seen_end[key]))
    finally:
        consumer.unassign()
    return bounds


def _topic_metadata(consumer: Consumer, topic: str, deadline: float) -> Any:
    """The topic's metadata (None: unknown to the broker); a broker that cannot answer yet (restarting, electing
    a leader) is asked again until `deadline`."""
    while True:
        try:
            meta = consumer.list_topics(topic, timeout=max(0.5, deadline - time.monotonic())).topics.get(topic)
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise KafkaRangeError(f"no metadata of Kafka topic {topic!r} from the broker: {exc}") from exc
            time.sleep(0.1)
            continue
        transient = meta is not None and meta.error is not None and meta.error.code() in _TRANSIENT_CODES
        if not transient or time.monotonic() >= deadline:
            return meta
        time.sleep(0.1)


def _check_partition(consumer: Consumer, rng: KafkaRange, where: str, deadline: float) -> None:
    """Refuse a range whose topic or partition does not exist."""
    meta = _topic_metadata(consumer, rng.topic, deadline)
    if meta is None or meta.error is not None or rng.partition not in meta.partitions:
        reason = meta.error if meta is not None and meta.error is not None else "no such partition"
        raise KafkaRangeError(f"cannot read {where}: the topic or partition does not exist ({reason})")


def _listed_offsets(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """(low, high) as ListOffsets says, asked again while the broker answers with a retriable error (a leader
    being elected: Apache Kafka says "not leader" for a moment after a topic is created or a broker restarts)."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()), cached=False)
            return max(0, low), max(0, high)
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _TRANSIENT_CODES) or time.monotonic() >= deadline:
                raise KafkaRangeError(f"cannot list the offsets of {tp.topic}:{tp.partition}: {exc}") from exc
            time.sleep(0.1)


def _log_start(consumer: Consumer, tp: TopicPartition, start: int, deadline: float) -> int:
    """The partition's log start, asked again for up to EOF_GRACE_S while it says records from `start` are gone:
    right after a broker restart the earliest-offset answer can be missing, and librdkafka then reports the high
    watermark as the low one (a range from offset 92 was refused with "records before offset 637", the log's end,
    while the log on disk started at 0)."""
    until = min(deadline, time.monotonic() + EOF_GRACE_S)
    while True:
        low, _ = _listed_offsets(consumer, tp, deadline)
        if low <= start or time.monotonic() >= until:
            return low
        time.sleep(0.2)


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
        deadline = time.monotonic() + options.read_timeout_s
        _check_partition(consumer, rng, where, deadline)
        try:
            low = _log_start(consumer, TopicPartition(rng.topic, rng.partition), rng.start, deadline)
        except KafkaRangeError as exc:
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
                    if err.code() in _OUT_OF_RANGE_CODES:
                        raise KafkaRangeError(_short_log(where, rng, _listed_end(consumer, tp, options), err))
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
                        raise KafkaRangeError(_short_log(where, rng, high))
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


def _listed_end(consumer: Consumer, tp: TopicPartition, options: KafkaSourceOptions) -> int | None:
    """The partition's end as the broker lists it now, or None when it cannot be asked."""
    try:
        return consumer.get_watermark_offsets(tp, timeout=options.read_timeout_s, cached=False)[1]
    except KafkaException:
        return None


def _short_log(where: str, rng: KafkaRange, end: int | None, err: KafkaError | None = None) -> str:
    """Why a planned range cannot be read from a log that ends before it (Kafka's out-of-range error, or Tansu's
    silence past the end)."""
    ends = "ends before it" if end is None else f"ends at offset {end}"
    detail = "" if err is None else f"; {err.str()}"
    return (
        f"cannot read {where}: the broker says the partition {ends}, the range was planned up to {rng.end} "
        f"(topic deleted and re-created, or records lost on the broker{detail})"
    )


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
