"""Topic administration over confluent-kafka's AdminClient: create (and wait until visible), delete, list,
read a topic's config.

Creation waits for the metadata to show every partition with a leader, because a producer or Spark source
that asks too early sees an unknown topic or too few partitions.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType


def admin_client(bootstrap: str, config: Mapping[str, object] | None = None) -> AdminClient:
    """An AdminClient for `bootstrap`, with extra librdkafka settings from `config`."""
    return AdminClient({"bootstrap.servers": bootstrap, **(config or {})})


def list_topics(bootstrap: str, timeout_s: float = 10.0, config: Mapping[str, object] | None = None) -> dict[str, int]:
    """Topic name → partition count, internal topics (leading `__`) left out."""
    metadata = admin_client(bootstrap, config).list_topics(timeout=timeout_s)
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None and not name.startswith("__")
    }


def topic_config(
    bootstrap: str, topic: str, timeout_s: float = 10.0, config: Mapping[str, object] | None = None
) -> dict[str, str]:
    """The config entries the broker reports for `topic` (name → value; entries without a value left out).

    Raises KafkaException when the broker refuses or does not answer (an unknown topic, no permission).
    A broker may leave out entries it only knows as defaults (Tansu reports only those set on the topic).
    """
    admin = admin_client(bootstrap, config)  # kept until the answer is in: a collected client cancels its requests
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=timeout_s).values()
    entries = future.result(timeout=timeout_s)
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def create_topics(
    bootstrap: str,
    names: Iterable[str] | str,
    partitions: int,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    timeout_s: float = 30.0,
    client: Mapping[str, object] | None = None,
) -> None:
    """Create topics with `partitions` partitions each and return once their metadata is complete.

    With `exist_ok`, a topic that already exists is accepted (its partition count is not changed). `config`: the
    topics' settings; `client`: the admin client's (TLS, SASL).
    """
    topics = [names] if isinstance(names, str) else list(names)
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    admin = admin_client(bootstrap, client)
    new = [NewTopic(t, partitions, replication_factor, config=dict(config or {})) for t in topics]
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    want: dict[str, int | None] = {}
    for topic, future in futures.items():
        want[topic] = partitions
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if not (exist_ok and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            want[topic] = 1  # an existing topic keeps its own partition count
    _wait_for(admin, want, timeout_s)


def delete_topics(bootstrap: str, names: Iterable[str] | str, missing_ok: bool = True, timeout_s: float = 30.0) -> None:
    """Delete topics and return once the metadata no longer lists them."""
    topics = [names] if isinstance(names, str) else list(names)
    if not topics:
        return
    admin = admin_client(bootstrap)
    futures = admin.delete_topics(topics, operation_timeout=timeout_s, request_timeout=timeout_s)
    for future in futures.values():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            if not (missing_ok and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise
    _wait_for(admin, dict.fromkeys(topics), timeout_s)


def _partition_counts(admin: AdminClient, topics: list[str], timeout_s: float) -> dict[str, int | None]:
    """Per topic: the number of partitions that have a leader, or None when the topic is unknown."""
    metadata = admin.list_topics(timeout=timeout_s)
    counts: dict[str, int | None] = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            counts[name] = None
        else:
            counts[name] = sum(1 for p in topic.partitions.values() if p.error is None and p.leader >= 0)
    return counts


def _wait_for(admin: AdminClient, want: Mapping[str, int | None], timeout_s: float) -> None:
    """Poll metadata until each topic has at least `want[t]` led partitions, or is gone when None."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = _partition_counts(admin, list(want), timeout_s=max(1.0, deadline - time.monotonic()))
        pending = {
            t: counts[t] for t, n in want.items() if (counts[t] is not None if n is None else (counts[t] or 0) < n)
        }
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"topic metadata not as expected after {timeout_s:g} s: want {dict(want)} (None = deleted), "
                f"got {pending}"
            )
        time.sleep(0.1)
