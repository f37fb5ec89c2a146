"""The arrivals reader on the real broker: it counts what the topics hold, so the controller sees the arrival rate."""

from __future__ import annotations

from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.arrivals import KafkaArrivals
from windjoin.connectors.kafka.producer import produce


def test_arrivals_count_the_records_appended_to_every_partition(kafka_bootstrap, unique_topic):
    topics = [unique_topic("r"), unique_topic("s")]
    create_topics(kafka_bootstrap, topics, 3)
    arrivals = KafkaArrivals(kafka_bootstrap, topics)
    try:
        assert arrivals() == 0
        produce(kafka_bootstrap, topics[0], [(str(i).encode(), b"{}", None) for i in range(25)])
        produce(kafka_bootstrap, topics[1], [(str(i).encode(), b"{}", None) for i in range(7)])
        assert arrivals() == 32
        produce(kafka_bootstrap, topics[1], [(b"k", b"{}", None)] * 5)
        assert arrivals() == 37
    finally:
        arrivals.close()
