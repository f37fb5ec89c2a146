"""A slot's results leave from its executor: staged into every sink as the slot's piece of the batch, its refused
rows produced as dead letters; the driver gets only a summary (`slot_summary`) and closes the batch.

The results never pass through the driver (ARCHITECTURE.md, "Results are written by the executors"): the output
rate grows with executors and the driver's memory does not grow with a batch's result count. Everything here is
pickled into the join's slots, so sinks keep no live clients when pickled (`RedisSink` makes one per worker
process) and dead-letter writers are made once per worker process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from windjoin.connectors.kafka.security import PLAINTEXT, KafkaSecurity
from windjoin.operators.result_table import BATCH_ID, EMITTED_AT, order_results, result_schema, result_times
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.dead_letters import DeadLetterWriter
from windjoin.pipelines.job.sinks import Sink

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every task of a micro-batch


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where a slot produces its dead letters."""

    bootstrap: str
    topic: str
    security: KafkaSecurity = PLAINTEXT  # credentials are read from their files on the executor


@dataclass(frozen=True)
class SlotOutputs:
    """What a slot writes its results to: the staged sinks, and the dead-letter topic (None: counted only)."""

    sinks: tuple[Sink, ...] = ()
    dead_letters: DeadLetterTarget | None = None


# One dead-letter writer per target per Python worker process (it reads the topic's limit once).
_WRITERS: dict[DeadLetterTarget, DeadLetterWriter] = {}


def current_batch_id() -> int:
    """The micro-batch this task belongs to, from the task's local properties (Spark sets them on the driver)."""
    context = TaskContext.get()
    value = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if value is None:
        raise RuntimeError(f"no {BATCH_ID_PROPERTY} in the task's local properties: not a streaming micro-batch")
    return int(value)


def write_slot(
    outputs: SlotOutputs,
    spec: JoinSpec,
    batch_id: int,
    piece: int,
    pairs: Mapping[str, Sequence[pa.Table]],
    refused: pa.Table,
    emitted_at: int,
) -> dict[str, Any]:
    """Stage the slot's pairs per task (ordered by `output_order`) into every sink as `piece`, produce its dead
    letters, and return the summary the driver needs (`slot_summary`)."""
    tables, ordering = result_tables(spec, batch_id, pairs, emitted_at)
    started = time.perf_counter()
    for sink in outputs.sinks:
        sink.stage(batch_id, piece, tables)
    staging = time.perf_counter() - started
    dead_letters = 0
    if outputs.dead_letters is not None and refused.num_rows:
        writer = _WRITERS.setdefault(
            outputs.dead_letters,
            DeadLetterWriter(
                outputs.dead_letters.bootstrap, outputs.dead_letters.topic, security=outputs.dead_letters.security
            ),
        )
        dead_letters = writer.write(refused.to_pandas())
    return slot_summary(tables, refused, emitted_at) | {
        "dead_letters": dead_letters,
        "order_seconds": ordering,
        "stage_seconds": staging,
    }


def result_tables(
    spec: JoinSpec, batch_id: int, pairs: Mapping[str, Sequence[pa.Table]], emitted_at: int
) -> tuple[dict[str, pa.Table], float]:
    """The slot's result table per task that has results (`result_table.result_schema`, ordered by the spec's
    `output_order`), and the seconds the ordering took."""
    tables: dict[str, pa.Table] = {}
    ordering = 0.0
    for task, parts in pairs.items():
        if not parts or not sum(len(p) for p in parts):
            continue
        table = pa.concat_tables(parts)
        rows = len(table)
        table = table.append_column(EMITTED_AT, pa.array(np.full(rows, emitted_at), pa.int64()))
        table = table.append_column(BATCH_ID, pa.array(np.full(rows, batch_id), pa.int64()))
        schema = result_schema(spec, task)
        started = time.perf_counter()
        tables[task] = order_results(table.select(schema.names).cast(schema), spec.output_order)
        ordering += time.perf_counter() - started
    return tables, ordering


def slot_summary(tables: Mapping[str, pa.Table], refused: pa.Table, emitted_at: int) -> dict[str, Any]:
    """The slot's emission time; per task the pairs staged and their largest result time; the production delays
    (emission less result time, ms) as an exact histogram [values, counts]; the refused rows by reason."""
    times = {task: result_times(table) for task, table in tables.items()}
    delays = emitted_at - np.concatenate([np.zeros(0, np.int64), *times.values()])
    values, counts = np.unique(delays, return_counts=True)
    return {
        "emitted_at": emitted_at,
        "pairs": {task: [len(t), int(times[task].max())] for task, t in tables.items()},
        "delays": [values.tolist(), counts.tolist()],
        "dead_by_reason": {str(c["values"]): int(c["counts"]) for c in pc.value_counts(refused["reason"]).to_pylist()},
    }
