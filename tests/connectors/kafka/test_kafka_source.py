"""Tests of the Kafka streaming source: offset planning (pure), broker reads, and Spark streaming queries.

The Spark tests run real queries (Trigger.AvailableNow, foreachBatch) against the session's broker.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from tests.support.available_now import run_to_end
from windjoin.connectors.kafka.admin import create_topics, delete_topics
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.kafka.range_reader import KafkaRangeError, list_partitions, probe_partition_bounds, read_range
from windjoin.connectors.kafka.source import SOURCE_NAME, register_kafka_source
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.offset_plan import KafkaRange, parse_offset

# Module-level so the tests also run when tests/conftest.py does not load these plugins (pytest refuses
# pytest_plugins in a non-top-level conftest, but honours it in a test module; a plugin is loaded once).
pytest_plugins = ["tests.services_fixtures", "tests.spark_fixtures"]

BASE_TS = 1_700_000_000_000

try:  # pyspark >= 4.2 offers Python sources admission control (read limits); 4.0 / 4.1 do not
    from pyspark.sql.streaming.datasource import ReadMaxRows  # noqa: F401

    HAS_ADMISSION_CONTROL = True
except ImportError:
    HAS_ADMISSION_CONTROL = False


# ---------------------------------------------------------------------------------------------------------
# Options (no Spark, no broker)
# ---------------------------------------------------------------------------------------------------------


def test_options_are_validated_with_the_key_and_the_bad_value() -> None:
    ok = KafkaSourceOptions.from_options(
        {"bootstrap.servers": "h:1", "topics": " a, b ,", "startingOffsets": "Earliest", "kafka.client.id": "x"}
    )
    assert ok.topics == ("a", "b") and ok.starting_offsets == "earliest" and ok.max_offsets_per_trigger is None
    assert ok.consumer_config()["client.id"] == "x"
    with pytest.raises(ValueError, match="'bootstrap.servers' is required"):
        KafkaSourceOptions.from_options({"topics": "a"})
    with pytest.raises(ValueError, match="'topics'"):
        KafkaSourceOptions.from_options({"bootstrap.servers": "h:1", "topics": " , "})
    with pytest.raises(ValueError, match="'startingOffsets'.*'middle'"):
        KafkaSourceOptions.from_options({"bootstrap.servers": "h:1", "topics": "a", "startingOffsets": "middle"})
    with pytest.raises(ValueError, match="'maxOffsetsPerTrigger'.*'-3'"):
        KafkaSourceOptions.from_options({"bootstrap.servers": "h:1", "topics": "a", "maxOffsetsPerTrigger": "-3"})


# ---------------------------------------------------------------------------------------------------------
# Broker reads (no Spark)
# ---------------------------------------------------------------------------------------------------------

Record = tuple[str, int, int, bytes, bytes, int]  # topic, partition, offset, key, value, timestamp


def produce(bootstrap: str, topic: str, partition: int, first: int, count: int) -> list[Record]:
    """Produce `count` records numbered from `first` to one partition; return them as the source should."""
    records = [
        (f"k-{topic}-{partition}-{i}".encode(), f"v{i}".encode() * (1 + i % 3), BASE_TS + 7 * i)
        for i in range(first, first + count)
    ]
    producer = BatchProducer(bootstrap)
    producer.produce_batch(topic, records, partition=partition)
    return [(topic, partition, first + j, k, v, ts) for j, (k, v, ts) in enumerate(records)]


def test_partition_ends_come_from_the_fetch_high_watermark(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    create_topics(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, 0, 0, 200)  # one produce request: Tansu's ListOffsets says 1
    produce(kafka_bootstrap, topic, 1, 0, 1)
    options = KafkaSourceOptions.from_options({"bootstrap.servers": kafka_bootstrap, "topics": topic})
    consumer = Consumer(options.consumer_config())
    try:
        parts = list_partitions(consumer, [topic], 10)
        assert parts == [(topic, 0), (topic, 1), (topic, 2)]
        bounds = probe_partition_bounds(consumer, parts, 10)
        assert bounds == {f"{topic}:0": (0, 200), f"{topic}:1": (0, 1), f"{topic}:2": (0, 0)}
        with pytest.raises(KafkaRangeError, match="not available"):
            list_partitions(consumer, [topic + "-missing"], 5)
    finally:
        consumer.close()


def test_read_range_stops_exactly_at_the_end_and_fails_clearly_when_the_range_is_gone(
    kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    create_topics(kafka_bootstrap, topic, 1)
    expected = produce(kafka_bootstrap, topic, 0, 0, 300)
    options = KafkaSourceOptions.from_options(
        {"bootstrap.servers": kafka_bootstrap, "topics": topic, "consume.batch.size": "64", "read.timeout.ms": "2000"}
    )
    batches = list(read_range(options, KafkaRange(topic, 0, 10, 277)))
    assert [b.num_rows for b in batches] == [64, 64, 64, 64, 11]
    rows = [r for b in batches for r in b.to_pylist()]
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]) for r in rows] == (
        expected[10:277]
    )

    with pytest.raises(KafkaRangeError, match=r"range \[250, 400\).*ends at offset 300"):
        list(read_range(options, KafkaRange(topic, 0, 250, 400)))
    delete_topics(kafka_bootstrap, topic)
    with pytest.raises(KafkaRangeError, match="does not exist"):
        list(read_range(options, KafkaRange(topic, 0, 0, 10)))
    # Re-created with fewer records: the planned range lies past the new log's end.
    create_topics(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, 0, 0, 50)
    with pytest.raises(KafkaRangeError, match=r"range \[250, 300\).*ends at offset 50"):
        list(read_range(options, KafkaRange(topic, 0, 250, 300)))


# ---------------------------------------------------------------------------------------------------------
# Spark streaming queries
# ---------------------------------------------------------------------------------------------------------


class Collector:
    """A foreachBatch sink keeping (batch id, rows) per batch, in memory on the driver."""

    def __init__(self, fail_batch: int | None = None) -> None:
        self.batches: list[tuple[int, list[tuple[Any, ...]]]] = []
        self.fail_batch = fail_batch
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        if batch_id == self.fail_batch:
            raise RuntimeError(f"simulated crash in batch {batch_id}")
        rows = [(r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value), r.timestamp) for r in df.collect()]
        with self._lock:
            self.batches.append((batch_id, rows))

    def records(self) -> list[Record]:
        return [row for _, rows in self.batches for row in rows]


def run_available_now(spark: Any, options: dict[str, str], checkpoint: Path, sink: Collector) -> None:
    """Run one Trigger.AvailableNow query to completion (its error, if any, is raised)."""
    register_kafka_source(spark)
    reader = spark.readStream.format(SOURCE_NAME)
    for key, value in options.items():
        reader = reader.option(key, value)
    run_to_end(reader, sink, checkpoint)


@pytest.fixture
def two_topics(kafka_bootstrap: str, unique_topic: Callable[..., str]) -> tuple[str, str]:
    left, right = unique_topic("left"), unique_topic("right")
    create_topics(kafka_bootstrap, left, 3)
    create_topics(kafka_bootstrap, right, 2)
    return left, right


def test_every_message_arrives_exactly_once_and_a_restart_reads_only_new_ones(
    spark: Any, kafka_bootstrap: str, two_topics: tuple[str, str], tmp_path: Path
) -> None:
    left, right = two_topics
    expected = []
    for topic, counts in ((left, (40, 0, 75)), (right, (1, 60))):
        for partition, count in enumerate(counts):
            expected += produce(kafka_bootstrap, topic, partition, 0, count)
    options = {"bootstrap.servers": kafka_bootstrap, "topics": f"{left},{right}", "startingOffsets": "earliest"}
    first = Collector()
    run_available_now(spark, options, tmp_path / "checkpoint", first)
    assert sorted(first.records()) == sorted(expected)
    assert len(first.records()) == len(expected) == 176

    # More data, then a restart from the checkpoint: only the new records, each once.
    new = produce(kafka_bootstrap, left, 1, 0, 30) + produce(kafka_bootstrap, right, 1, 60, 25)
    second = Collector()
    run_available_now(spark, options, tmp_path / "checkpoint", second)
    assert sorted(second.records()) == sorted(new)
    assert min(b for b, _ in second.batches) > max(b for b, _ in first.batches)


def test_max_offsets_per_trigger_splits_the_backlog_into_bounded_batches(
    spark: Any, kafka_bootstrap: str, two_topics: tuple[str, str], tmp_path: Path
) -> None:
    left, right = two_topics
    expected = produce(kafka_bootstrap, left, 0, 0, 90) + produce(kafka_bootstrap, left, 2, 0, 20)
    expected += produce(kafka_bootstrap, right, 1, 0, 50)
    options = {
        "bootstrap.servers": kafka_bootstrap,
        "topics": f"{left},{right}",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "45",
    }
    sink = Collector()
    run_available_now(spark, options, tmp_path / "checkpoint", sink)
    assert sorted(sink.records()) == sorted(expected)
    sizes = [len(rows) for _, rows in sink.batches]
    if HAS_ADMISSION_CONTROL:
        assert sizes == [45, 45, 45, 25]
        # each planned offset records what the topics held beyond it: the job's backlog
        planned = [
            json.loads((tmp_path / "checkpoint" / "offsets" / str(b)).read_text().splitlines()[-1]) for b in range(4)
        ]
        assert [offset["waiting"] for offset in planned] == [115, 70, 25, 0]
        # Fair split of the first batch: 15 per partition with data (3 partitions have 90, 20, 50).
        first = sorted({(r[0], r[1]) for r in sink.batches[0][1]})
        assert first == sorted([(left, 0), (left, 2), (right, 1)])
    else:  # pyspark 4.0/4.1: no admission control for Python sources, AvailableNow runs one batch
        assert sizes == [160]


def test_a_replayed_batch_keeps_its_rows(
    spark: Any, kafka_bootstrap: str, two_topics: tuple[str, str], tmp_path: Path
) -> None:
    left, right = two_topics
    expected = produce(kafka_bootstrap, left, 0, 0, 25) + produce(kafka_bootstrap, right, 1, 0, 35)
    options = {"bootstrap.servers": kafka_bootstrap, "topics": f"{left},{right}", "startingOffsets": "earliest"}
    checkpoint = tmp_path / "checkpoint"
    crashing = Collector(fail_batch=0)
    with pytest.raises(Exception, match="simulated crash in batch 0"):
        run_available_now(spark, options, checkpoint, crashing)
    planned = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert {k: n for k, n in parse_offset(planned).items() if n} == {f"{left}:0": 25, f"{right}:1": 35}

    # More records arrive while the job is down; the replayed batch must not take them.
    later = produce(kafka_bootstrap, left, 2, 0, 15)
    replay = Collector()
    run_available_now(spark, options, checkpoint, replay)
    if not HAS_ADMISSION_CONTROL and len(replay.batches) == 1:
        # pyspark 4.0/4.1 run AvailableNow on a Python source as one batch: here the replay alone.
        run_available_now(spark, options, checkpoint, replay)
    batch_ids = [batch_id for batch_id, _ in replay.batches]
    assert batch_ids[0] == 0
    replayed = replay.batches[0][1]
    assert sorted(replayed) == sorted(expected)
    rest = [row for batch_id, rows in replay.batches[1:] for row in rows]
    assert sorted(rest) == sorted(later)


def test_a_running_query_reads_records_produced_while_it_runs(
    spark: Any, kafka_bootstrap: str, two_topics: tuple[str, str], tmp_path: Path
) -> None:
    left, right = two_topics
    register_kafka_source(spark)
    produce(kafka_bootstrap, left, 0, 0, 10)  # before the query: skipped by startingOffsets=latest
    sink = Collector()
    query = (
        spark.readStream.format(SOURCE_NAME)
        .option("bootstrap.servers", kafka_bootstrap)
        .option("topics", f"{left},{right}")
        .option("maxOffsetsPerTrigger", "30")
        .load()
        .writeStream.foreachBatch(sink)
        .trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        deadline = time.monotonic() + 60  # wait until the first trigger has taken the initial offsets
        while query.status["message"] != "Waiting for next trigger" and time.monotonic() < deadline:
            time.sleep(0.1)
        expected: list[Record] = []
        for round_ in range(3):
            expected += produce(kafka_bootstrap, left, 1 + round_ % 2, 20 * (round_ // 2), 20)
            expected += produce(kafka_bootstrap, right, 1, 15 * round_, 15)
            deadline = time.monotonic() + 60
            while len(sink.records()) < len(expected) and time.monotonic() < deadline and query.isActive:
                time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(sink.records()) == sorted(expected)
    if HAS_ADMISSION_CONTROL:
        assert max(len(rows) for _, rows in sink.batches) <= 30
