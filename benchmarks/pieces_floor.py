"""The floor of the job's own shape: a Python streaming source handing Arrow IPC pieces per slot to a stateful count.

Spark's rate source (`spark_floor`) has no Python read stage, yet the join job reads in Python and ships its rows as
pieces (`pipelines.job.slot_pieces`). This trivial query does exactly that and nothing else: each batch a Python
source makes `rows` rows of 14 numeric columns in two read tasks, packs them per slot with the job's own
`PieceBuffer`, Spark shuffles the pieces by slot, and `transformWithStateInPandas` (RocksDB, changelog
checkpointing) opens them with the job's `open_pieces` and counts the rows into one value per slot; a noop sink.
(`../shared/probes/blob_shuffle_floor.py` measured the same shape: 418 ms a batch at 8,000 rows, 557 ms at 200,000.)
"""

from __future__ import annotations

import statistics
import uuid
from pathlib import Path
from typing import Any

from benchmarks.delays import uniform_arrival_delays
from benchmarks.spark_floor import measured_progress


def pieces_floor(spark: Any, seconds: float, workdir: Path, rows: int) -> dict[str, Any]:
    """Median batch time (triggerExecution, ms) of the trivial pieces query at `rows` rows a batch."""
    from windjoin.pipelines.job.join_job import STATE_CONF, slot_labels

    for key, value in STATE_CONF.items():
        spark.conf.set(key, value)
    labels = slot_labels(spark, 2)
    spark.dataSource.register(_source(rows, labels))
    query = (
        _count_pieces(spark.readStream.format("windjoin_pieces_floor").load())
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(workdir / f"floor-pieces-{uuid.uuid4().hex[:6]}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    progress = measured_progress(query, seconds)
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    out = {
        "batches": len(batch_ms),
        "batch_ms_median": statistics.median(batch_ms) if batch_ms else None,
        "rows_per_batch": rows,
        "delay_to_commit_uniform": uniform_arrival_delays(progress).summary(),
    }
    print(f"floor pieces: {out}", flush=True)
    return out


def _source(rows: int, labels: tuple[int, ...]) -> Any:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from windjoin.pipelines.job.slot_pieces import PIECE_DDL, PieceBuffer

    schema = _schema()  # a value the workers get with the class, not a call into this module

    class Reader(DataSourceStreamReader):
        def __init__(self) -> None:
            self.batch = 0

        def initialOffset(self) -> dict:  # noqa: N802 - Spark's names
            return {"batch": 0}

        def latestOffset(self, start: Any = None, limit: Any = None) -> dict:  # noqa: N802
            self.batch += 1  # a new batch at every trigger
            return {"batch": self.batch}

        def partitions(self, start: dict, end: dict) -> list:
            return [InputPartition((end["batch"], task)) for task in range(2)]

        def read(self, partition: Any) -> Any:
            batch, task = partition.value
            rng = np.random.default_rng(batch * 2 + task)
            n = rows // 2
            columns = [rng.integers(0, 10**7, n) if i % 2 == 0 else rng.random(n) for i in range(14)]
            slot = np.asarray(labels, np.int32)[np.arange(n) % len(labels)]
            table = pa.Table.from_arrays([*columns, slot], schema=schema)
            pieces = PieceBuffer(table.schema)
            for adapted in table.to_batches():
                yield from pieces.add(adapted)
            yield from pieces.flush()

        def commit(self, end: dict) -> None:
            pass

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "windjoin_pieces_floor"

        def schema(self) -> str:
            return PIECE_DDL

        def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
            return Reader()

    return Source


def _schema() -> Any:
    """The source's rows: 14 numeric columns (int64 and float64 in turn) and the slot."""
    import pyarrow as pa

    return pa.schema(
        [*((f"c{i}", pa.int64() if i % 2 == 0 else pa.float64()) for i in range(14)), ("slot", pa.int32())]
    )


def _count_pieces(source: Any) -> Any:
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    from windjoin.pipelines.job.slot_pieces import open_pieces

    schema = _schema()

    class CountPieces(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.n = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802
            total = open_pieces((p for df in rows for p in df["piece"]), schema).num_rows
            prev = self.n.get()[0] if self.n.exists() else 0
            self.n.update((prev + total,))
            yield pd.DataFrame({"slot": [int(key[0])], "n": [prev + total]})

        def close(self) -> None:
            pass

    return source.groupBy("slot").transformWithStateInPandas(
        statefulProcessor=CountPieces(), outputStructType="slot int, n long", outputMode="Update", timeMode="None"
    )
