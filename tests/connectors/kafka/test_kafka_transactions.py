"""The source's reads of topics an upstream transactional producer writes, on Apache Kafka (Tansu keeps no
transactions: it serves aborted records to `read_committed` readers).

Transactions leave offsets that hold no record (each commit or abort writes a control marker), aborted records a
`read_committed` reader must skip, and, while a transaction is open, a log whose end (the high watermark) lies past
what such a reader may see (the last stable offset). The source plans ranges up to partition ends and reads them
exactly; each case below checks the records read equal the committed ones, in offset order, and that a planned
range never waits on an open transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.range_reader import list_partitions, probe_partition_bounds, read_range
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators.offset_plan import KafkaRange, partition_key

pytest_plugins = ["tests.services_fixtures"]


def _transactional(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"upstream-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def _transaction(producer: Producer, topic: str, values: list[str], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _bounds(bootstrap: str, topic: str) -> tuple[int, int]:
    options = KafkaSourceOptions.from_options({"bootstrap.servers": bootstrap, "topics": topic})
    consumer = Consumer(options.consumer_config())
    try:
        return probe_partition_bounds(consumer, list_partitions(consumer, [topic], 10), 10)[partition_key(topic, 0)]
    finally:
        consumer.close()


def _read(bootstrap: str, topic: str, start: int, end: int) -> list[tuple[int, str]]:
    options = KafkaSourceOptions.from_options(
        {"bootstrap.servers": bootstrap, "topics": topic, "read.timeout.ms": "8000"}
    )
    rows = [r for b in read_range(options, KafkaRange(topic, 0, start, end)) for r in b.to_pylist()]
    return [(r["offset"], r["value"].decode()) for r in rows]


def test_committed_and_aborted_transactions_read_as_the_committed_records_alone(
    apache_kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    create_topics(apache_kafka_bootstrap, topic, 1)
    producer = _transactional(apache_kafka_bootstrap)
    _transaction(producer, topic, ["a0", "a1", "a2"], commit=True)
    _transaction(producer, topic, ["x0", "x1"], commit=False)
    _transaction(producer, topic, ["b0"], commit=True)
    _transaction(producer, topic, ["y0"], commit=False)  # the log ends in an abort marker
    low, high = _bounds(apache_kafka_bootstrap, topic)
    # 3 + 2 + 1 + 1 records and 4 markers: offsets 0-2 a, 3 marker, 4-5 x, 6 marker, 7 b0, 8 marker, 9 y0, 10 marker
    assert (low, high) == (0, 11)
    assert _read(apache_kafka_bootstrap, topic, low, high) == [(0, "a0"), (1, "a1"), (2, "a2"), (7, "b0")]
    assert _read(apache_kafka_bootstrap, topic, 3, 8) == [(7, "b0")]  # a range of markers and aborted records
    assert _read(apache_kafka_bootstrap, topic, 8, 11) == []  # nothing committed in it: it ends, empty


def test_an_open_transaction_is_not_planned_until_it_ends(
    apache_kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    topic = unique_topic()
    create_topics(apache_kafka_bootstrap, topic, 1)
    producer = _transactional(apache_kafka_bootstrap)
    _transaction(producer, topic, ["a0", "a1"], commit=True)
    producer.begin_transaction()
    for value in ("open0", "open1"):
        producer.produce(topic, value.encode(), partition=0)
    producer.flush(30)  # written to the log, not yet committed
    low, end = _bounds(apache_kafka_bootstrap, topic)
    assert (low, end) == (0, 3)  # the last stable offset: a planned range never waits on the open transaction
    assert _read(apache_kafka_bootstrap, topic, low, end) == [(0, "a0"), (1, "a1")]
    producer.commit_transaction(30)
    _, after = _bounds(apache_kafka_bootstrap, topic)
    assert after == 6
    assert _read(apache_kafka_bootstrap, topic, end, after) == [(3, "open0"), (4, "open1")]
