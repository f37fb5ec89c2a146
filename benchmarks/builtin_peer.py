"""Spark's built-in stream-stream join as the peer, in each configuration Spark 4.3 offers it, with proof of which ran.

The peer at its best: the default (HDFS-backed) state store with join state format 2, and RocksDB (changelog
checkpointing) with format 4, which indexes join state by event time for eviction (SPARK-55144). Both are SQL confs
a query reads when it starts (its session is cloned in `start()`) and then keeps in its checkpoint's offset log:
they are set around `start()` only, and every query has its own checkpoint (the format is fixed by it). What ran is
read back from the checkpoint: the confs in its offset log and the files its state store wrote.

Each configuration reads the topics two ways: through windjoin's Kafka reader (the `windjoin-kafka` Python
source), and through Spark's own Kafka source (`format("kafka")`, spark-sql-kafka-0-10, when the setup fetched it:
connectors.spark.connector_jars), named `<config>+spark_kafka`. The faster is the baseline; both are recorded.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.delays import DelayHistogram
from windjoin.connectors.spark.connector_jars import spark_kafka_jars

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
FORMAT = "spark.sql.streaming.join.stateFormatVersion"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# name -> (the SQL confs of the query, None = Spark's default; the state files that show it ran)
CONFIGS: dict[str, dict[str, str | None]] = {
    "hdfs_v2": {PROVIDER: None, FORMAT: "2", CHANGELOG: None},
    "rocksdb_v4": {PROVIDER: ROCKSDB_PROVIDER, FORMAT: "4", CHANGELOG: "true"},
}
EXPECTED = {
    "hdfs_v2": {"provider": HDFS_PROVIDER, "format": "2", "state_files": "delta"},
    "rocksdb_v4": {"provider": ROCKSDB_PROVIDER, "format": "4", "state_files": "changelog"},
}


SPARK_KAFKA = "spark_kafka"  # the suffix of a peer reading through Spark's own Kafka source


def peers(only: str = "") -> list[str]:
    """The peers to measure: every configuration through windjoin's reader, and through Spark's Kafka source when
    its jars are there; or those of them named in `only` (comma-separated; a smoke run's subset)."""
    names = list(CONFIGS)
    every = names + [f"{c}+{SPARK_KAFKA}" for c in CONFIGS] if spark_kafka_jars() else names
    chosen = [name for name in only.split(",") if name]
    unknown = [name for name in chosen if name not in every]
    if unknown:
        raise ValueError(f"--peers: {unknown} are not peers here; accepted: {', '.join(every)}")
    return chosen or every


def _parts(peer: str) -> tuple[str, str]:
    """(configuration, reader) of a peer's name."""
    config, _, reader = peer.partition("+")
    return config, reader or "windjoin"


class BuiltinSink:
    """foreachBatch of the built-in join: pairs grouped by result time (ms), collected, delays counted; each
    batch's groups are kept so that delays can later be taken to the batch's commit."""

    def __init__(self, since_ms: int = 0) -> None:
        self.since_ms = since_ms
        self.received = DelayHistogram()
        self.pairs = 0
        self.batches: list[dict[str, Any]] = []
        self.groups: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # batch id -> (result times, pairs)

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        rows = df.groupBy("t").count().collect()
        now_ms = int(time.time() * 1000)
        t = np.array([r["t"] for r in rows], dtype=np.int64)
        n = np.array([r["count"] for r in rows], dtype=np.int64)
        keep = t >= self.since_ms
        self.received.add(now_ms - t[keep], n[keep])
        self.groups[batch_id] = (t[keep], n[keep])
        pairs = int(n.sum())
        self.pairs += pairs
        self.batches.append(
            {"batch_id": batch_id, "pairs": pairs, "action_s": time.perf_counter() - started, "at_ms": now_ms}
        )


def start_builtin(
    spark: Any,
    peer: str,
    topics: tuple[str, str],
    bootstrap: str,
    sink: BuiltinSink,
    checkpoint: Path,
    mopt: int,
    window_ms: int,
    lateness_ms: int,
    how: str = "inner",
) -> Any:
    """The built-in join of R(ts, k, x) and S(ts, k, a) on k within `window_ms`, watermarks `lateness_ms` behind,
    as `peer` (a name of `peers()`), batches back to back into `sink`; the session's confs are as they were when
    this returns. `how`: Spark's join type ("inner", "left_outer": an R row alone once the
    watermark passes its window, S null; its result time R's)."""
    from pyspark.sql import functions as F

    from windjoin.connectors.kafka.source import SOURCE_NAME, register_kafka_source

    register_kafka_source(spark)
    config, reader = _parts(peer)

    def read(topic: str, field_name: str) -> Any:
        if reader == SPARK_KAFKA:
            stream = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            stream = stream.option("subscribe", topic)
        else:
            stream = spark.readStream.format(SOURCE_NAME).option("bootstrap.servers", bootstrap)
            stream = stream.option("topics", topic)
        raw = stream.option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(max(1, mopt // 2)))
        parsed = raw.load().select(
            F.from_json(F.col("value").cast("string"), f"ts long, k long, {field_name} long").alias("v")
        )
        return parsed.select("v.*")

    joined = builtin_join(read(topics[0], "x"), read(topics[1], "a"), window_ms, lateness_ms, how).select(
        F.greatest("r_ts", "s_ts").alias("t")
    )
    writer = (
        joined.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"builtin-{config}-{reader}-{uuid.uuid4().hex[:6]}")
        .trigger(processingTime="0 seconds")
    )
    return start_as(spark, config, writer)


def builtin_join(
    r: Any, s: Any, window_ms: int, lateness_ms: int, how: str = "inner", band_width: int | None = None
) -> Any:
    """Spark's stream-stream join of R(ts, k, x) and S(ts, k, a) (ts in epoch ms) on k, within `window_ms` of each
    other, each side watermarked `lateness_ms` behind its event time; with `band_width` also |x - a| <= it.
    Columns r_ts, r_k, r_x, s_ts, s_k, s_a."""
    from pyspark.sql import functions as F

    def side(frame: Any, name: str, field_name: str) -> Any:
        return (
            frame.select(
                F.col("ts").alias(f"{name}_ts"),
                F.col("k").alias(f"{name}_k"),
                F.col(field_name).alias(f"{name}_{field_name}"),
                F.timestamp_millis(F.col("ts")).alias(f"{name}_et"),
            )
            .withWatermark(f"{name}_et", f"{lateness_ms} milliseconds")
            .alias(name)
        )

    window = f"interval {window_ms} milliseconds"
    condition = f"r_k = s_k AND r_et BETWEEN s_et - {window} AND s_et + {window}"
    if band_width is not None:
        condition += f" AND abs(r_x - s_a) <= {band_width}"
    joined = side(r, "r", "x").join(side(s, "s", "a"), F.expr(condition), how)
    return joined.drop("r_et", "s_et")


def start_as(spark: Any, config: str, writer: Any) -> Any:
    """`writer.start()` with the SQL confs of `config` (a name of CONFIGS), which the query keeps in its checkpoint;
    the session's confs are as they were when this returns."""
    saved = {key: spark.conf.get(key, None) for key in CONFIGS[config]}
    try:
        _set_confs(spark, CONFIGS[config])
        return writer.start()
    finally:
        _set_confs(spark, saved)


def _set_confs(spark: Any, confs: dict[str, str | None]) -> None:
    for key, value in confs.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def evidence(peer: str, checkpoint: Path) -> dict[str, Any]:
    """What the query of `checkpoint` ran with: the state store and join state format in its first offset log
    entry, the kinds of file its state store wrote and the store folders of partition 0; `in_effect` when they
    are the configuration's of `peer`; and which reader it read with."""
    config, reader = _parts(peer)
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    conf = json.loads(logs[0].read_text().splitlines()[1]).get("conf", {}) if logs else {}
    state = checkpoint / "state" / "0"
    suffixes = Counter(f.suffix.lstrip(".") or f.name for f in state.rglob("*") if f.is_file())
    partition0 = state / "0"
    stores = sorted(d.name for d in partition0.iterdir() if d.is_dir()) if partition0.is_dir() else []
    found = {"provider": conf.get(PROVIDER), "format": conf.get(FORMAT)}
    want = EXPECTED[config]
    return {
        **found,
        "reader": reader,
        "state_file_kinds": dict(sorted(suffixes.items())),
        "partition0_folders": stores,
        "in_effect": found == {"provider": want["provider"], "format": want["format"]}
        and suffixes.get(want["state_files"], 0) > 0,
    }


def best(runs: dict[str, dict[str, Any]], key: Any, lower: bool = False) -> str:
    """The configuration whose run is best by `key` (a function of a run; None counts as worst)."""
    worst = float("inf") if lower else float("-inf")

    def score(name: str) -> float:
        value = key(runs[name])
        return worst if value is None else value

    return (min if lower else max)(runs, key=score)
