"""windjoin's Kafka source beside Spark's own (spark-sql-kafka-0-10, the jars the setup fetches) on Apache Kafka.

Spark's Kafka source is the reference for what a Spark job reads from a topic: both read the same topics here,
written by a plain and by a transactional producer (commit markers, an aborted transaction), and must give the
same records, which are the committed ones. And the source under a running query picks up the partitions added
to its topic, from their first offset (as Spark's does).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.support.available_now import run_to_end
from windjoin.connectors.kafka.admin import create_topics
from windjoin.connectors.kafka.producer import produce
from windjoin.connectors.kafka.source import SOURCE_NAME, register_kafka_source
from windjoin.connectors.spark.connector_jars import spark_kafka_jars

pytest_plugins = ["tests.services_fixtures", "tests.spark_fixtures"]

BASE_TS = 1_700_000_000_000
Row = tuple[str, int, int, bytes, bytes, int]  # topic, partition, offset, key, value, timestamp ms


class Rows:
    """A foreachBatch sink keeping every row (topic, partition, offset, key, value, timestamp ms) on the driver."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, _batch_id: int) -> None:
        from pyspark.sql import functions as F

        picked = df.select("topic", "partition", "offset", "key", "value", F.col("timestamp"))
        rows = []
        for r in picked.collect():
            ts = r.timestamp if isinstance(r.timestamp, int) else int(r.timestamp.timestamp() * 1000)
            rows.append((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value), ts))
        with self._lock:
            self.rows.extend(rows)


def _windjoin_reader(spark: Any, bootstrap: str, topic: str) -> Any:
    register_kafka_source(spark)
    reader = spark.readStream.format(SOURCE_NAME).option("bootstrap.servers", bootstrap).option("topics", topic)
    return reader.option("startingOffsets", "earliest")


def _spark_reader(spark: Any, bootstrap: str, topic: str) -> Any:
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    return reader.option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed")


def _drain(reader: Any, checkpoint: Path) -> list[Row]:
    sink = Rows()
    run_to_end(reader, sink, checkpoint)
    return sorted(sink.rows)


@pytest.fixture(scope="module")
def connector() -> None:
    if not spark_kafka_jars():
        pytest.fail("Spark's Kafka connector is missing: `bash scripts/fetch_jars.sh spark-kafka` fetches it")


def test_both_sources_read_the_committed_records_of_a_transactional_topic(
    connector: None, spark: Any, apache_kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap, topic = apache_kafka_bootstrap, unique_topic()
    create_topics(bootstrap, topic, 2)
    expected: list[tuple[int, bytes, bytes]] = []
    plain = [(f"p{i}".encode(), f"plain-{i}".encode(), BASE_TS + i) for i in range(40)]
    produce(bootstrap, topic, plain, partition=0)
    expected += [(0, k, v) for k, v, _ in plain]
    upstream = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"up-{uuid.uuid4().hex}"})
    upstream.init_transactions(30)
    for txn, commit in enumerate((True, False, True, False, True)):
        upstream.begin_transaction()
        for partition in (0, 1):
            for i in range(7):
                key, value = f"t{txn}-{i}".encode(), f"txn{txn}-p{partition}-{i}".encode()
                upstream.produce(topic, value, key=key, partition=partition, timestamp=BASE_TS + 100 * txn + i)
                if commit:
                    expected.append((partition, key, value))
        upstream.flush(30)
        (upstream.commit_transaction if commit else upstream.abort_transaction)(30)

    ours = _drain(_windjoin_reader(spark, bootstrap, topic), tmp_path / "ours")
    spark_own = _drain(_spark_reader(spark, bootstrap, topic), tmp_path / "spark")
    assert ours == spark_own
    assert sorted((p, k, v) for _, p, _, k, v, _ in ours) == sorted(expected)
    assert len({(p, o) for _, p, o, *_ in ours}) == len(ours) == 40 + 3 * 14


def test_partitions_added_while_the_query_runs_are_read_from_their_start(
    spark: Any, apache_kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap, topic = apache_kafka_bootstrap, unique_topic()
    create_topics(bootstrap, topic, 1)
    first = [(b"a", f"before-{i}".encode(), BASE_TS + i) for i in range(20)]
    produce(bootstrap, topic, first, partition=0)
    sink = Rows()
    query = (
        _windjoin_reader(spark, bootstrap, topic)
        .load()
        .writeStream.foreachBatch(sink)
        .trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        _wait(lambda: len(sink.rows) >= 20, query, "the first records")
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future is done
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        added = {p: [(b"b", f"added-{p}-{i}".encode(), BASE_TS + 100 + i) for i in range(5)] for p in (1, 2)}
        for partition, records in added.items():
            produce(bootstrap, topic, records, partition=partition)
        _wait(lambda: len(sink.rows) >= 30, query, "the added partitions' records")
    finally:
        query.stop()
    got = sorted((p, o, v) for _, p, o, _, v, _ in sink.rows)
    want = sorted([(0, i, v) for i, (_, v, _) in enumerate(first)])
    want += sorted((p, i, v) for p, records in added.items() for i, (_, v, _) in enumerate(records))
    assert got == sorted(want)


def _wait(done: Callable[[], bool], query: Any, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"{what} not read in {timeout_s:g} s: {query.status} {query.lastProgress}"
        time.sleep(0.2)
