"""Dead-lettering refused records: the original bytes are fetched back from Kafka by their coordinates.

Join rows carry only (topic, partition, offset) through the shuffle; refused records are few, so reading
their bytes again when dead-lettering is cheaper than shipping every record's bytes through the join.
Each dead letter is keyed "topic:partition:offset", so a batch replayed after a crash produces duplicates
that a reader (or a compacted topic) recognises as the same record.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import pandas as pd

from windjoin.connectors.codec_errors import register_reason
from windjoin.connectors.dead_letter import DeadLetter, encode_dead_letter
from windjoin.connectors.kafka_producer import BatchProducer
from windjoin.connectors.kafka_source import KafkaRange, KafkaSourceOptions, read_range
from windjoin.operators import schema
from windjoin.pipelines.adapter import UNKNOWN_TOPIC

for _reason in (
    schema.MISSING_TIMESTAMP,
    schema.BAD_TIMESTAMP,
    schema.MISSING_FIELD,
    schema.WRONG_TYPE,
    schema.OUT_OF_RANGE,
    schema.LATE,
    schema.FUTURE_TIMESTAMP,
    UNKNOWN_TOPIC,
):
    register_reason(_reason)


def fetch_originals(bootstrap: str, coords: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], tuple]:
    """(key, value) bytes of each (topic, partition, offset), read once per partition's offset span."""
    wanted: dict[tuple[str, int], set[int]] = {}
    for topic, partition, offset in coords:
        wanted.setdefault((topic, partition), set()).add(offset)
    options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=tuple({t for t, _ in wanted}))
    found = {}
    for (topic, partition), offsets in wanted.items():
        span = KafkaRange(topic, partition, min(offsets), max(offsets) + 1, 0)
        for batch in read_range(options, span):
            cols = batch.to_pydict()
            for offset, key, value in zip(cols["offset"], cols["key"], cols["value"], strict=True):
                if offset in offsets:
                    found[(topic, partition, offset)] = (key, value)
    return found


def write_dead_letters(bootstrap: str, topic: str, rows: pd.DataFrame) -> int:
    """Produce one dead letter per refused row (stream, topic, kpartition, koffset, reason, detail)."""
    if rows.empty:
        return 0
    coords = list(zip(rows["topic"], rows["kpartition"].astype(int), rows["koffset"].astype(int), strict=True))
    originals = fetch_originals(bootstrap, coords)
    now = datetime.now(UTC)
    messages = []
    for (src_topic, partition, offset), stream, reason, detail in zip(
        coords, rows["stream"], rows["reason"], rows["detail"], strict=True
    ):
        key, value = originals.get((src_topic, partition, offset), (None, None))
        letter = DeadLetter(
            reason=reason,
            detail=detail or "",
            stream=stream or "?",
            topic=src_topic,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            dead_lettered_at=now,
        )
        messages.append((f"{src_topic}:{partition}:{offset}".encode(), encode_dead_letter(letter), None))
    # A letter carries the original bytes (base64, 4/3 of their size), so a refused record near or over the
    # codecs' 1 MiB limit makes a letter over librdkafka's default message.max.bytes (1,000,000), which
    # produce() refuses with MSG_SIZE_TOO_LARGE: the batch then failed on every replay. Allow the largest letter.
    largest = max(len(letter) for _, letter, _ in messages)
    with BatchProducer(bootstrap, {"message.max.bytes": max(1_000_000, 2 * largest)}) as producer:
        producer.produce_batch(topic, messages)
    return len(messages)
