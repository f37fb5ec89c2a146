"""A thin confluent-kafka producer for (key, value, timestamp) batches that fails loudly.

confluent-kafka reports delivery failures only through callbacks; a loader or test that ignores them
silently loses records. `produce_batch` flushes and raises `DeliveryError` if any record failed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping
from types import TracebackType

from confluent_kafka import KafkaError, KafkaException, Message, Producer

Payload = bytes | str | None
Record = tuple[Payload, Payload, int | None]  # (key, value, event timestamp in ms since epoch or None)


class DeliveryError(RuntimeError):
    """Some records of a batch were not acknowledged by the broker."""

    def __init__(self, topic: str, failed: int, total: int, errors: list[KafkaError]) -> None:
        sample = "; ".join(str(e) for e in errors[:5])
        super().__init__(f"{failed} of {total} records to {topic!r} were not delivered: {sample}")
        self.failed = failed
        self.errors = errors


class BatchProducer:
    """Produces batches to Kafka; each `produce_batch` call returns only when all records are acknowledged."""

    def __init__(self, bootstrap: str, config: Mapping[str, object] | None = None, report_state: bool = False) -> None:
        # acks=all and idempotence keep retries from duplicating or reordering records.
        settings: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
        settings.update(config or {})
        self._idempotence_state: str | None = None
        self._reports_state = report_state
        if report_state:  # librdkafka's statistics carry the idempotent producer's state (for `wait_until_ready`)
            settings.update({"statistics.interval.ms": 100, "stats_cb": self._on_statistics})
        self._producer = Producer(settings)

    def _on_statistics(self, statistics: str) -> None:
        self._idempotence_state = json.loads(statistics).get("eos", {}).get("idemp_state")

    def wait_until_ready(self, timeout_s: float = 10.0) -> bool:
        """Wait until the idempotent producer holds its producer id; False if not within `timeout_s` (needs
        `report_state`). librdkafka asks for the id only once it knows a broker by its id, and retries every
        0.5 s: left alone, the first records of a paced schedule wait ~1 s for it. A metadata request up front
        names the brokers at once (the id then comes in ~0.1 s)."""
        if not self._reports_state:
            raise ValueError("wait_until_ready needs BatchProducer(report_state=True): nothing reports the state")
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(KafkaException):  # only a head start: the id may still come
            self._producer.list_topics(timeout=timeout_s)
        while self._idempotence_state != "Assigned":
            if time.monotonic() > deadline:
                return False
            self._producer.poll(0.02)
        return True

    def produce_batch(
        self,
        topic: str,
        records: Iterable[Record],
        partition: int | None = None,
        timeout_s: float = 30.0,
    ) -> int:
        """Produce `records` to `topic` (partitioned by key unless `partition` is given); return the count.

        Raises DeliveryError if any record failed, TimeoutError if some are still unacknowledged after
        `timeout_s`.
        """
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        extra = {} if partition is None else {"partition": partition}
        total = 0
        for key, value, timestamp in records:
            kwargs = dict(extra)
            if timestamp is not None:
                kwargs["timestamp"] = int(timestamp)
            while True:
                try:
                    self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry this record
                    self._producer.poll(0.1)
            total += 1
            self._producer.poll(0)
        remaining = self._producer.flush(timeout_s)
        if errors:
            raise DeliveryError(topic, len(errors), total, errors)
        if remaining:
            raise TimeoutError(
                f"{remaining} of {total} records to {topic!r} still unacknowledged after {timeout_s:g} s"
            )
        return total

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush anything left in the queue."""
        self._producer.flush(timeout_s)

    def __enter__(self) -> BatchProducer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def produce(bootstrap: str, topic: str, records: Iterable[Record], partition: int | None = None) -> int:
    """One-shot: produce a batch with a fresh producer, wait for every acknowledgement."""
    with BatchProducer(bootstrap) as producer:
        return producer.produce_batch(topic, records, partition=partition)
