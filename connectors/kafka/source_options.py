"""The Kafka source's options, validated once from Spark's case-insensitive option map, and the librdkafka
settings of the assign-only consumers built from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Validated source options (built once, from Spark's case-insensitive option map)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    read_timeout_s: float = 60.0
    consume_batch_size: int = 10_000
    read_tasks: int | None = None  # Spark tasks per batch (ranges grouped); None: one task per partition
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    security: KafkaSecurity = PLAINTEXT  # TLS / SASL (the password is read when a consumer is built)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        bootstrap = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError("option 'bootstrap.servers' is required (host:port[,host:port...])")
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        if not topics:
            raise ValueError(
                f"option 'topics' must name at least one topic (comma-separated), got {opts.get('topics')!r}"
            )
        starting = opts.get("startingoffsets", "latest").strip().lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(
                f"option 'startingOffsets' must be 'earliest' or 'latest', got {opts['startingoffsets']!r}"
            )
        max_offsets = None
        if opts.get("maxoffsetspertrigger"):
            max_offsets = _positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
        read_timeout_ms = _positive_int("read.timeout.ms", opts.get("read.timeout.ms", "60000"))
        batch_size = _positive_int("consume.batch.size", opts.get("consume.batch.size", "10000"))
        read_tasks = _positive_int("read.tasks", opts["read.tasks"]) if opts.get("read.tasks") else None
        kafka_config = {
            k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
        }
        secrets = [k for k in kafka_config if "password" in k or k.startswith("sasl.")]
        if secrets:
            raise ValueError(
                f"option(s) {['kafka.' + k for k in secrets]}: credentials go in the spec's kafka: section"
            )
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            starting_offsets=starting,
            max_offsets_per_trigger=max_offsets,
            read_timeout_s=read_timeout_ms / 1000.0,
            consume_batch_size=batch_size,
            read_tasks=read_tasks,
            kafka_config=kafka_config,
            security=KafkaSecurity.from_options(opts),
        )

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings for an assign-only consumer (no group membership, no commits)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # Required by the client even though nothing subscribes or commits.
            "group.id": "windjoin-kafka-source",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # Out-of-range must be an error, never a silent jump to another offset.
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
            # Committed records only, never those of an aborted or open transaction (librdkafka's default, kept
            # explicit: the planned ends are the last stable offsets this level reads to).
            "isolation.level": "read_committed",
        }
        config.update(self.kafka_config)
        config.update(self.security.client_config())
        config.update(overrides)
        return config


def _positive_int(key: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"option {key!r} must be a positive integer, got {raw!r}")
    return value
