"""Dead letters always fit their topic: a refused record of any size is dead-lettered within the topic's
`max.message.bytes`, truncated and flagged when needed, with the original's position, size and digest.

Runs on both brokers, no Spark. Apache Kafka enforces a topic's `max.message.bytes`; Tansu reports it but does
not enforce it (it accepts a 3 MB record on a topic limited to 1 MiB), so the letters' sizes are also checked
against the limit here: each produced record, framed alone in a Kafka v2 record batch, must fit.
"""

from __future__ import annotations

import logging
import uuid

import pandas as pd
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.pipelines.dead_letter_helpers import describes, record_batch_bytes
from tests.services_fixtures import on_each_broker
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.dead_letter import CUT_MARK, MAX_DETAIL_CHARS, decode_dead_letter
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.pipelines.job.dead_letters import BROKER_DEFAULT_MAX_MESSAGE_BYTES, DeadLetterWriter

kafka_bootstrap = on_each_broker()  # these run on both brokers

BIG_PRODUCER = {"message.max.bytes": 8_000_000}  # the input topic takes records over librdkafka's 1 MB default
ONE_MIB = 1_048_576


def _read_raw(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of partition 0 of `topic`, to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        for _ in range(600):
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                if msg.error() is None:
                    records.append((msg.key(), msg.value()))
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    return records
                else:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
        raise AssertionError(f"no end of partition seen for {topic}")
    finally:
        consumer.close()


def _refuse(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, str]]) -> pd.DataFrame:
    """Produce `records` (key, value, detail) to `topic` (1 partition) and return the refused rows for them."""
    create_topics(bootstrap, topic, 1, config={"max.message.bytes": str(BIG_PRODUCER["message.max.bytes"])})
    with BatchProducer(bootstrap, BIG_PRODUCER) as producer:
        producer.produce_batch(topic, [(key, value, None) for key, value, _ in records], partition=0)
    return pd.DataFrame(
        {
            "stream": "A",
            "topic": topic,
            "kpartition": 0,
            "koffset": range(len(records)),
            "reason": "oversize",
            "detail": [detail for _, _, detail in records],
        }
    )


@pytest.mark.parametrize("limit", [ONE_MIB, 20_000])
def test_letters_of_any_size_fit_the_topic_limit(kafka_bootstrap, unique_topic, limit: int) -> None:
    source, dead = unique_topic("in"), unique_topic("dead")
    records = [
        (b"k-small", b'{"not": json', "a small refused record"),
        (b"k-1.5mb", b"{" + b"x" * 1_500_000, "1.5 MB, not JSON"),
        (b"k-3mb", bytes(range(256)) * 12_000, "3 MB, with a detail that quotes it: " + "\x01é" * 600_000),
        (b"K" * 700_000, b"v" * 900_000, "a huge key too"),
        (None, None, "no key, no value"),
    ] + [(f"k-{i}".encode(), b"m" * 15_000, "many mid-size letters in one producer batch") for i in range(20)]
    rows = _refuse(kafka_bootstrap, source, records)
    create_topics(kafka_bootstrap, dead, 1, config={"max.message.bytes": str(limit)})
    writer = DeadLetterWriter(kafka_bootstrap, dead)
    assert writer.message_limit() == limit

    assert writer.write(rows) == len(records)

    produced = _read_raw(kafka_bootstrap, dead)
    assert len(produced) == len(records)
    for offset, ((message_key, message), (key, value, detail)) in enumerate(zip(produced, records, strict=True)):
        assert message_key == f"{source}:0:{offset}".encode()
        assert record_batch_bytes(message_key, message) <= limit, f"letter {offset} is over the topic's limit"
        letter = decode_dead_letter(message)
        assert (letter.topic, letter.partition, letter.offset, letter.reason) == (source, 0, offset, "oversize")
        assert describes(letter, "key", key) and describes(letter, "value", value)
        complete = (letter.key, letter.value, letter.detail) == (key, value, detail)
        assert letter.truncated is not complete
        assert len(letter.detail) <= MAX_DETAIL_CHARS
        if letter.detail != detail:
            assert letter.detail.endswith(CUT_MARK)
    letters = [decode_dead_letter(message) for _, message in produced]
    assert not letters[0].truncated  # small letters stay whole
    assert letters[1].truncated and letters[1].value_size == 1_500_001
    assert len(letters[1].value) > limit // 2  # the room left goes to the value's prefix


def test_an_unreadable_limit_falls_back_to_the_broker_default_with_a_warning(
    kafka_bootstrap, unique_topic, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="windjoin.pipelines.job.dead_letters")
    missing = unique_topic("never-created")
    assert DeadLetterWriter(kafka_bootstrap, missing).message_limit() == BROKER_DEFAULT_MAX_MESSAGE_BYTES
    assert DeadLetterWriter("127.0.0.1:1", "dead", config_timeout_s=1).message_limit() == 1_048_588
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all("max.message.bytes" in w and "1048588" in w for w in warnings)
    assert missing in warnings[0] and "'dead'" in warnings[1]
