"""Dead-lettering refused records: the original bytes are fetched back from Kafka by their coordinates.

Join rows carry only (topic, partition, offset) through the shuffle; refused records are few, so reading
their bytes again when dead-lettering is cheaper than shipping every record's bytes through the join.
Each dead letter is keyed "topic:partition:offset", so a batch replayed after a crash produces duplicates
that a reader (or a compacted topic) recognises as the same record.

A letter carries the original bytes base64-encoded (4/3 of their size), so a refused record near the broker's
message limit makes a letter over it, which the broker refuses: the batch would fail on every replay. So each
letter is fitted (truncated and flagged when needed) to the dead-letter topic's `max.message.bytes`, less the
record batch framing, and the producer's batches are bounded by the same limit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

import pandas as pd
from confluent_kafka import KafkaException

from windjoin.connectors.formats.codec_errors import register_reason
from windjoin.connectors.kafka.admin import topic_config
from windjoin.connectors.kafka.dead_letter import DeadLetter, fit_dead_letter
from windjoin.connectors.kafka.producer import BatchProducer
from windjoin.connectors.kafka.range_reader import read_range
from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.connectors.kafka.source_options import KafkaSourceOptions
from windjoin.operators import schema
from windjoin.operators.offset_plan import KafkaRange
from windjoin.pipelines.job.adapter import UNKNOWN_TOPIC

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

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = "max.message.bytes"
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default message.max.bytes (1 MiB + 12)
# A v2 record batch's header (61 bytes) and one record's framing with its varints at their widest (36 bytes):
# the topic's limit applies to the batch, so a letter alone in one must leave this much room.
RECORD_OVERHEAD_BYTES = 61 + 36


def fetch_originals(
    bootstrap: str, coords: Iterable[tuple[str, int, int]], security: KafkaSecurity = PLAINTEXT
) -> dict[tuple[str, int, int], tuple]:
    """(key, value) bytes of each (topic, partition, offset), read once per partition's offset span."""
    wanted: dict[tuple[str, int], set[int]] = {}
    for topic, partition, offset in coords:
        wanted.setdefault((topic, partition), set()).add(offset)
    options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=tuple({t for t, _ in wanted}), security=security)
    found = {}
    for (topic, partition), offsets in wanted.items():
        span = KafkaRange(topic, partition, min(offsets), max(offsets) + 1)
        for batch in read_range(options, span):
            cols = batch.to_pydict()
            for offset, key, value in zip(cols["offset"], cols["key"], cols["value"], strict=True):
                if offset in offsets:
                    found[(topic, partition, offset)] = (key, value)
    return found


class DeadLetterWriter:
    """Produces the dead letters of refused rows to one topic, each within the topic's `max.message.bytes`.

    The limit is read from the topic's config once per writer; when it cannot be read, the broker default
    (1048588) is assumed and a warning logged.
    """

    def __init__(
        self, bootstrap: str, topic: str, config_timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.config_timeout_s = config_timeout_s
        self._limit: int | None = None

    def message_limit(self) -> int:
        """The topic's `max.message.bytes`, or the broker default when it cannot be read."""
        if self._limit is None:
            self._limit = self._read_limit()
        return self._limit

    def _read_limit(self) -> int:
        try:
            text = topic_config(self.bootstrap, self.topic, self.config_timeout_s, self.security.client_config()).get(
                MAX_MESSAGE_BYTES
            )
            if text is None:
                problem = "the broker does not report it"
            elif text.isdigit() and int(text) > 0:
                return int(text)
            else:
                problem = f"the broker reports {text!r}"
        except (KafkaException, TimeoutError) as exc:
            problem = f"describe_configs failed: {exc}"
        log.warning(
            "cannot read %s of dead-letter topic %r (%s); assuming the broker default %d",
            MAX_MESSAGE_BYTES,
            self.topic,
            problem,
            BROKER_DEFAULT_MAX_MESSAGE_BYTES,
        )
        return BROKER_DEFAULT_MAX_MESSAGE_BYTES

    def write(self, rows: pd.DataFrame) -> int:
        """Produce one dead letter per refused row (stream, topic, kpartition, koffset, reason, detail)."""
        if rows.empty:
            return 0
        limit = self.message_limit()
        coords = list(zip(rows["topic"], rows["kpartition"].astype(int), rows["koffset"].astype(int), strict=True))
        originals = fetch_originals(self.bootstrap, coords, self.security)
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
            message_key = f"{src_topic}:{partition}:{offset}".encode()
            fitted = fit_dead_letter(letter, limit - RECORD_OVERHEAD_BYTES - len(message_key))
            messages.append((message_key, fitted, None))
        # librdkafka's own limits must let the largest letter through, and a batch of several letters must stay
        # within the topic's limit too (batch.size counts the framing and never splits a single message).
        producer_config = {
            "message.max.bytes": min(1_000_000_000, max(1_000_000, limit + 65_536)),
            "batch.size": max(1, limit - RECORD_OVERHEAD_BYTES),
        }
        with BatchProducer(self.bootstrap, {**producer_config, **self.security.client_config()}) as producer:
            producer.produce_batch(self.topic, messages)
        return len(messages)
