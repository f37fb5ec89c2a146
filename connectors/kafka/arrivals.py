"""Records appended to a job's input topics so far: the controller's view of the arrival rate.

The sum over the topics' partitions of their high watermarks (the end taken from a Fetch response, as the
source does: Tansu's ListOffsets under-reports). Two readings a known time apart give the arrival rate,
whatever the job did with the records meanwhile (taken, still waiting, shed).
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer

from windjoin.connectors.kafka.range_reader import list_partitions, probe_partition_bounds
from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.connectors.kafka.source_options import KafkaSourceOptions


class KafkaArrivals:
    """Callable: the records the topics hold up to their ends now (sum of high watermarks)."""

    def __init__(
        self, bootstrap: str, topics: Sequence[str], timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        self.topics = tuple(topics)
        self.timeout_s = timeout_s
        options = KafkaSourceOptions(bootstrap_servers=bootstrap, topics=self.topics, security=security)
        self.consumer = Consumer(options.consumer_config(**{"fetch.wait.max.ms": 10}))

    def __call__(self) -> int:
        partitions = list_partitions(self.consumer, self.topics, self.timeout_s)
        bounds = probe_partition_bounds(self.consumer, partitions, self.timeout_s)
        return sum(high for _, high in bounds.values())

    def close(self) -> None:
        self.consumer.close()
