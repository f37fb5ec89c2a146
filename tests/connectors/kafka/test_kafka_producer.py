"""The producer waits for its producer id before a paced schedule starts (`windjoin generate`).

Left alone, librdkafka asks for the idempotent producer's id only once it knows a broker by its id and retries
every 0.5 s, so the first records of a schedule were held back ~1 s and every event time then ran that far behind
the wall clock (the demo's delays carried it).
"""

from __future__ import annotations

import socket

import pytest

from windjoin.connectors.kafka.producer import BatchProducer


def test_a_producer_reporting_its_state_is_ready_once_it_holds_its_id(kafka_bootstrap: str, unique_topic) -> None:
    producer = BatchProducer(kafka_bootstrap, report_state=True)
    assert producer.wait_until_ready(timeout_s=10.0)
    topic = unique_topic("ready")
    assert producer.produce_batch(topic, [(b"k", b"v", None)]) == 1
    producer.close()


def test_a_producer_without_a_broker_is_not_ready_and_says_so_in_time() -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    producer = BatchProducer(f"127.0.0.1:{port}", {"message.timeout.ms": 1000}, report_state=True)
    assert producer.wait_until_ready(timeout_s=0.5) is False


def test_waiting_for_a_state_nothing_reports_is_refused() -> None:
    producer = BatchProducer("127.0.0.1:1")
    with pytest.raises(ValueError, match="report_state=True"):
        producer.wait_until_ready(timeout_s=0.1)
