"""Spark's own floor on this machine: a trivial query of the join job's shape, timed in the same run as the job.

Spark's rate source into a noop sink, and the rate source through `groupBy(slot).transformWithStateInPandas`
holding one value per slot (RocksDB, changelog checkpointing, 2 slots) into a noop sink
(`../shared/probes/spark_batch_floor.py`'s shape). With `wide`, each row also carries the adapted row's columns
(`pipelines.job.adapter.adapter_schema` of the pipeline benchmark's spec: routing, provenance, reason, four field
columns), so the shuffle and the Arrow hand-over to the Python worker move what the job's join stage moves.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any


def floor(
    spark: Any, seconds: float, workdir: Path, rows_per_s: float = 2000, trigger_s: float = 0, wide: bool = False
) -> dict[str, Any]:
    """Median batch time (triggerExecution, ms) and rows per batch of rate -> noop and of rate ->
    transformWithStateInPandas -> noop; batches back to back (`trigger_s` 0) or every `trigger_s`."""
    from windjoin.pipelines.job.join_job import STATE_CONF

    for key, value in STATE_CONF.items():  # transformWithState's state store (another query may have unset it)
        spark.conf.set(key, value)
    out = {}
    for kind in ("noop", "stateful"):
        source = spark.readStream.format("rate").option("rowsPerSecond", max(1, round(rows_per_s))).load()
        if wide:
            source = _wide(source)
        if kind == "stateful":
            source = _count_per_slot(source)
        query = (
            source.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(workdir / f"floor-{kind}-{uuid.uuid4().hex[:6]}"))
            .trigger(processingTime=f"{trigger_s} seconds")
            .start()
        )
        progress = measured_progress(query, seconds)
        batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]
        rows = [p.get("numInputRows", 0) for p in progress]
        out[kind] = {
            "batches": len(batch_ms),
            "batch_ms_median": statistics.median(batch_ms) if batch_ms else None,
            "rows_per_batch_median": statistics.median(rows) if rows else None,
            "rows_per_s": sum(rows) / (sum(batch_ms) / 1000) if sum(batch_ms) else None,
        }
        print(f"floor {kind}: {out[kind]}", flush=True)
    return out


def measured_progress(
    query: Any, seconds: float, warmup: int = 2, at_least: int = 5, startup_s: float = 180.0
) -> list[dict]:
    """The query's progress reports after its first `warmup` batches (their start-up is not the floor, and is
    waited for apart, up to `startup_s`: a busy machine's first transformWithState batches can take longer than a
    short probe), once it ran `seconds` more and made at least `at_least` more, or after 6x `seconds` at most;
    then the query stops."""
    started = time.monotonic()
    while len(query.recentProgress) < warmup and query.isActive and time.monotonic() - started < startup_s:
        time.sleep(0.5)
    deadline = time.monotonic() + seconds
    give_up = time.monotonic() + 6 * seconds
    while time.monotonic() < deadline or (len(query.recentProgress) < warmup + at_least and time.monotonic() < give_up):
        time.sleep(0.5)
    progress = [json.loads(p.json) for p in query.recentProgress][warmup:]
    query.stop()
    return progress


def _wide(source: Any) -> Any:
    from pyspark.sql import functions as F

    value = F.col("value")
    return source.select(
        F.lit(0).cast("int").alias("part"),
        F.lit("R").alias("stream"),
        (value * 7).alias("ts"),
        F.lit("bench-topic").alias("topic"),
        (value % 4).cast("int").alias("kpartition"),
        value.alias("koffset"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("string").alias("detail"),
        F.lit(True).alias("stored"),
        (value % 10_000_001).alias("R__k"),
        (value % 10_000).alias("R__x"),
        F.lit(None).cast("long").alias("S__k"),
        F.lit(None).cast("long").alias("S__a"),
        value,
    )


def _count_per_slot(source: Any) -> Any:
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class CountPerSlot(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            total = sum(len(df) for df in rows)
            prev = self.n.get()[0] if self.n.exists() else 0
            self.n.update((prev + total,))
            yield pd.DataFrame({"slot": [int(key[0])], "n": [prev + total]})

        def close(self) -> None:
            pass

    return (
        source.withColumn("slot", (F.col("value") % 2).cast("int") * 2)
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=CountPerSlot(),
            outputStructType="slot int, n long",
            outputMode="Update",
            timeMode="None",
        )
    )
