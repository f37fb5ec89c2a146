"""The source's reads of logs with holes, on Apache Kafka: records deleted below a planned range (retention, or
`DeleteRecords`) are a clear error naming the first offset left, and a compacted topic's offsets with gaps are
read exactly as a plain consumer reads them (Tansu neither deletes nor compacts)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.range_reader import KafkaRangeError, read_range
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.offset_plan import KafkaRange

pytest_plugins = ["tests.services_fixtures"]


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value.encode(), key.encode(), partition=0)
    assert producer.flush(30) == 0


def _read(bootstrap: str, topic: str, start: int, end: int) -> list[tuple[int, str]]:
    options = KafkaSourceOptions.from_options(
        {"bootstrap.servers": bootstrap, "topics": topic, "read.timeout.ms": "8000"}
    )
    rows = [r for b in read_range(options, KafkaRange(topic, 0, start, end)) for r in b.to_pylist()]
    return [(r["offset"], r["value"].decode()) for r in rows]


def _plain_read(bootstrap: str, topic: str, end: int) -> list[tuple[int, str]]:
    """What a plain consumer reads of partition 0 from its start up to `end`: the independent reader."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "plain", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: list[tuple[int, str]] = []
    deadline = time.monotonic() + 30
    try:
        while not read or read[-1][0] < end - 1:
            assert time.monotonic() < deadline, read
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                read.append((message.offset(), message.value().decode()))
    finally:
        consumer.close()
    return read


def test_records_deleted_below_a_range_are_an_error_naming_the_first_left(apache_kafka_bootstrap, unique_topic):
    topic = unique_topic("deleted")
    create_topics(apache_kafka_bootstrap, topic, 1)
    _produce(apache_kafka_bootstrap, topic, [(f"k{i}", f"v{i}") for i in range(10)])
    admin = AdminClient({"bootstrap.servers": apache_kafka_bootstrap})
    [done] = admin.delete_records([TopicPartition(topic, 0, 6)]).values()
    assert done.result(30).low_watermark == 6
    with pytest.raises(KafkaRangeError, match=r"range \[2, 10\): records before offset 6 no longer exist"):
        _read(apache_kafka_bootstrap, topic, 2, 10)
    assert _read(apache_kafka_bootstrap, topic, 6, 10) == [(i, f"v{i}") for i in range(6, 10)]


def test_a_compacted_topics_offsets_with_gaps_are_read_as_a_plain_consumer_reads_them(
    apache_kafka_bootstrap, unique_topic
):
    topic = unique_topic("compacted")
    compact = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    create_topics(apache_kafka_bootstrap, topic, 1, config=compact)
    for round_ in range(3):  # each key written again in every round, each round in segments of its own
        _produce(apache_kafka_bootstrap, topic, [(f"k{i}", f"r{round_}-{i}") for i in range(20)])
        time.sleep(0.3)
    _produce(apache_kafka_bootstrap, topic, [("last", "rolls the segment before it")])
    end = 61
    deadline = time.monotonic() + 90  # the log cleaner runs every log.cleaner.backoff.ms (1 s on the local broker)
    while len(read := _read(apache_kafka_bootstrap, topic, 0, end)) == end:
        assert time.monotonic() < deadline, "the topic was not compacted within 90 s"
        time.sleep(1)
    offsets = [offset for offset, _ in read]
    assert offsets == sorted(offsets) and len(read) < end and offsets[-1] == end - 1  # holes, read to the end
    assert read == _plain_read(apache_kafka_bootstrap, topic, end)
    newest = {f"k{i}": f"r2-{i}" for i in range(20)}
    assert set(newest.values()) <= {value for _, value in read}  # compaction keeps each key's newest value
