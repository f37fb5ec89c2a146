"""The stateful join inside Spark: one `transformWithStateInPandas` group per slot, windows kept as segments.

Per slot and batch: a handful of state calls, never one per row. `JoinProcessor` composes the rooms of a slot's
state (`slot_state`: Spark's, or any store with its calls): its metadata (`slot_meta`, one value), its stored
tuples and their expiry (`segment_store`, Arrow IPC segments), its decoded windows cached between batches
(`slot_windows`), holder changes (`hand_over`), disk pushes and clean-ups (`slot_spill`), the batch's rows
(`slot_batch`) and its summary (`slot_stats`). Lateness and expiry (time windows) follow the batch's watermark,
planned with its offsets over every input partition (operators.event_time) and the same at every slot, so a
partition's pieces judge each tuple alike wherever they are held, and a replay judges as the first time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from windjoin.operators.control.slot_load import PartState
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.schema import LATE
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.job.adapter import adapter_schema
from windjoin.pipelines.job.hand_over import HandOver, check_held
from windjoin.pipelines.job.segment_store import SegmentStore, expiry_watermark
from windjoin.pipelines.job.slot_batch import DEAD_COLUMNS, SlotBatch, StreamColumns, pairs_table
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.slot_output import SlotOutputs, current_batch_id, write_slot
from windjoin.pipelines.job.slot_pieces import open_pieces
from windjoin.pipelines.job.slot_spill import SlotSpill, SpillReport
from windjoin.pipelines.job.slot_state import SlotState, SparkSlotState
from windjoin.pipelines.job.slot_stats import BatchWork, slot_stats
from windjoin.pipelines.job.slot_windows import cached_windows, keep_windows
from windjoin.pipelines.job.window_cache import WindowFiles

OUTPUT_DDL = "slot int, stats binary"  # one row per slot and batch: its summary as JSON (results leave elsewhere)


class JoinProcessor(StatefulProcessor):
    dead_columns = DEAD_COLUMNS  # what a refused row keeps on its way out (`SlotBatch.classify`)

    def __init__(
        self,
        spec: JoinSpec,
        slot_labels: tuple[int, ...] = (),
        initial_routing: RoutingTable | None = None,
        move_root: str | None = None,
        spill_root: str | None = None,
        outputs: SlotOutputs | None = None,
    ) -> None:
        self.spec = spec
        self.outputs = outputs or SlotOutputs()  # where the slot's results and dead letters go
        # grouping-key value -> slot index, for the load reports (without labels a slot reports its key)
        self.slot_index = {label: i for i, label in enumerate(slot_labels)}
        # Where each slot's partitions start out (the source's first control epoch routes by it), and where
        # moved partitions' state is handed over (operators.control.job_epoch).
        self.initial_routing = initial_routing or RoutingTable.round_robin(spec.partitions, spec.slots)
        self.move_root = move_root
        self.spill_root = spill_root  # where pushed generations are written (paper 004)
        self.schema = adapter_schema(spec)  # the layout of the rows in the slot's pieces

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open(SparkSlotState(handle))

    def open(self, state: SlotState) -> None:
        """Build the slot's rooms over its state (Spark's, or another `SlotState`)."""
        # this job's shared window files (pipelines.job.window_cache), named after its state folders; made here,
        # in the Python worker, as their folder is the worker machine's
        self.window_files = WindowFiles(f"{self.move_root}|{self.spill_root}")
        self.state = state
        self.segments = SegmentStore(self.spec, state)
        self.moves = HandOver(self.spec, self.initial_routing, self.move_root, self.segments)
        self.spill = SlotSpill(self.spec, self.spill_root, self.segments)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        slot = int(key[0])
        table = open_pieces((p for f in rows for p in f["piece"]), self.schema)
        yield from self.join_pieces(slot, table, timerValues)

    def join_pieces(self, slot: int, table: pa.Table, timer_values: Any) -> Iterator[pd.DataFrame]:
        """Join one batch's adapted rows at `slot`; yields what the query outputs (`output`)."""
        index = self.slot_index.get(slot, slot)
        started, cpu_started = time.perf_counter(), time.process_time()
        stored = self.state.meta()
        meta = SlotMeta() if stored is None else SlotMeta.from_stored(stored)
        windows = cached_windows(slot, meta.nonce, self.window_files) or self.segments.windows(meta)
        phases = {"state_load_ms": (time.perf_counter() - started) * 1000}
        batch = SlotBatch.classify(table, self.dead_columns)
        self.take_clock(batch, timer_values)
        epoch = batch.epoch
        meta.take_watermark(batch.clock.get("watermark"))
        windows.set_watermark(meta.watermark)  # every partition's window expires, whether rows came for it or not
        self.spill.forget_retired(meta)
        moved_in = self.moves.install(index, meta, windows, epoch) if epoch is not None else []
        check_held(self.spec, index, meta, batch.live)
        join_started = time.perf_counter()
        parts = batch.live.column("part").to_numpy().astype(np.int32)
        joined = windows.join_batch(meta, StreamColumns(self.spec, batch.live), parts)
        phases["join_ms"] = (time.perf_counter() - join_started) * 1000
        pairs_by_task = joined.tables
        kept = np.ones(batch.live.num_rows, dtype=bool)
        kept[joined.late] = False
        kept &= batch.live.column("stored").to_numpy().astype(bool)  # a spread partition's probe-only copies: not
        write_started = time.perf_counter()
        self.segments.append(meta, batch.live.filter(pa.array(kept)))

        phases["state_write_ms"] = (time.perf_counter() - write_started) * 1000
        spill_report = SpillReport()
        if epoch is not None and epoch.spill:
            self.spill.push(meta, windows, epoch.spill, spill_report)
        if epoch is not None and epoch.cleanup:
            for pairs in self.spill.cleanup(meta, windows, epoch.cleanup, spill_report):
                pairs_by_task[pairs.task].append(pairs_table(self.spec, pairs))
        dead_rows = pa.concat_tables([batch.dead, _late_rows(batch.live, joined.late, meta, self.dead_columns)])
        # The slot's results leave from here, as its piece of the batch (numbered by the slot's index).
        emitted_at = int(time.time() * 1000)
        output = self.emit(index, pairs_by_task, dead_rows, emitted_at)
        joined_held = windows.held()
        moved_out = self.moves.hand_over(index, meta, windows, epoch) if epoch is not None else []
        # outer, semi and anti tuples close only at the batch's watermark, the same at every slot, so a rebuilt or
        # handed-over window recalls exactly which closed (a later horizon would close some unemitted)
        horizon = (
            meta.watermark
            if self.spec.tracking
            else expiry_watermark(meta.watermark, batch.clock.get("marks"), batch.marks, self.spec)
        )
        write_started = time.perf_counter()
        self.segments.expire(meta, windows, horizon)
        meta.nonce = windows.nonce = uuid.uuid4().hex
        self.state.set_meta(meta.to_stored())
        keep_windows(slot, windows, self.window_files)
        phases["state_write_ms"] += (time.perf_counter() - write_started) * 1000
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
        work = BatchWork(
            moved_in=moved_in,
            moved_out=moved_out,
            dead=len(dead_rows),
            horizon=horizon,
            groups=joined.meter.report(_reported(joined_held, windows.held(), moved_out), seconds, cpu_seconds),
            phases=phases,
            seconds=seconds,
            cpu_seconds=cpu_seconds,
            spill=spill_report,
        )
        history = self.spec.max_history_ms if self.spec.window.event_time else None
        stats = slot_stats(index, batch, meta, work, history)
        stats.update(output)
        yield from self.output(slot, stats)

    def take_clock(self, batch: SlotBatch, timer_values: Any) -> None:
        """Where the batch's event-time clock comes from: here, the adapter planned it with the offsets."""

    def emit(
        self, index: int, pairs_by_task: dict[str, list[pa.Table]], dead_rows: pa.Table, emitted_at: int
    ) -> dict[str, Any]:
        """The slot's results leave: staged into the sinks as its piece of the batch; returns their summary."""
        return write_slot(self.outputs, self.spec, current_batch_id(), index, pairs_by_task, dead_rows, emitted_at)

    def output(self, slot: int, stats: dict[str, Any]) -> Iterator[pd.DataFrame]:
        """What the query outputs per slot and batch: the slot's summary (OUTPUT_DDL)."""
        yield pd.DataFrame([(slot, orjson.dumps(stats))], columns=["slot", "stats"])

    def close(self) -> None:
        pass


def _reported(joined: dict[int, PartState], held: dict[int, PartState], moved_out: list[Group]) -> dict[int, PartState]:
    """The state to report per partition: what the slot holds after the batch, and a piece handed over after
    this batch as it was joined here (its new holder reports it from the next batch on), so its state never
    vanishes from the reports while in flight."""
    gone = {g.partition for g in moved_out if g.partition in joined and g.partition not in held}
    return {**{p: joined[p] for p in gone}, **held}


def _late_rows(live: pa.Table, late: np.ndarray, meta: SlotMeta, columns: list[str]) -> pa.Table:
    """The live rows refused as late, as dead rows; a late tuple of a spread partition is reported once, by the
    slot that would have stored it."""
    rows = live.take(pa.array(late))
    rows = rows.filter(rows.column("stored")).select(columns)
    detail = (
        f"event time is behind the watermark {meta.watermark} (the newest event time of the slowest "
        "input partition, less allowed_lateness_ms)"
    )
    n = rows.num_rows
    rows = rows.set_column(rows.schema.get_field_index("reason"), "reason", pa.array([LATE] * n, pa.string()))
    return rows.set_column(rows.schema.get_field_index("detail"), "detail", pa.array([detail] * n, pa.string()))
