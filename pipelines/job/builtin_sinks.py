"""The built-in sink kinds (parquet, redis, delta, kafka) and the snapshot committer, registered with `sinks`.

With a Parquet sink, snapshots close by the spec's policies; a Redis sink beside it then keeps every result until
a snapshot holds it (no trimming at write time; the committer moves old results out, see `snapshot_committer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.client import spec_auth
from windjoin.connectors.redis.sink import RedisSink
from windjoin.operators.delta_sink_config import DeltaSinkSpec
from windjoin.operators.kafka_sink_spec import KafkaSinkSpec
from windjoin.operators.spec import JoinSpec, ParquetSinkSpec, RedisSinkSpec
from windjoin.pipelines.job.sinks import Sink, register_after_commit, register_sink
from windjoin.pipelines.job.snapshot_committer import SnapshotCommitter


def parquet_sink(config: ParquetSinkSpec, spec: JoinSpec) -> ParquetSink:
    return ParquetSink(config.path)


def redis_sink(config: RedisSinkSpec, spec: JoinSpec) -> RedisSink:
    """Trims by itself only without Parquet (else the snapshot committer moves old results out)."""
    return RedisSink(
        config.url,
        config.retain_ms,
        trim=spec.sinks.parquet is None,
        feed_batches=config.feed_batches,
        max_bytes=config.max_bytes,
        auth=spec_auth(config),
    )


def delta_sink(config: DeltaSinkSpec, spec: JoinSpec) -> Any:
    """One Delta table of every task's results (delta-rs is imported only by a spec that names the sink)."""
    from windjoin.connectors.files.delta_sink import DeltaSink, spec_table_schema

    return DeltaSink(config.path, spec_table_schema(spec), [t.name for t in spec.tasks])


def kafka_sink(config: KafkaSinkSpec, spec: JoinSpec) -> Any:
    """Each task's result rows as records of one topic, exactly once for read_committed consumers (the Avro
    schemas are registered here, on the driver, in the spec's schema registry)."""
    from windjoin.connectors.kafka.results_sink import spec_kafka_sink

    return spec_kafka_sink(config, spec)


def snapshot_committer(
    spec: JoinSpec, sinks: Mapping[str, Sink], clock: Callable[[], float]
) -> SnapshotCommitter | None:
    """Snapshots close over the Parquet sink's batches and advance the Redis tier; none without Parquet."""
    parquet = spec.sinks.parquet
    if parquet is None:
        return None
    tasks = [t.name for t in spec.tasks]
    store = SnapshotStore(parquet.path)
    return SnapshotCommitter(store, tasks, parquet.snapshots.every_ms, parquet.retain_ms, sinks.get("redis"), clock)


register_sink("parquet", ParquetSinkSpec, parquet_sink)
register_sink("redis", RedisSinkSpec, redis_sink)
register_sink("delta", DeltaSinkSpec, delta_sink)
register_sink("kafka", KafkaSinkSpec, kafka_sink)
register_after_commit(snapshot_committer)
