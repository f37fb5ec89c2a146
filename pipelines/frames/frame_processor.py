"""The slot's join for `join_stream`: the job's own processor, its results returned as rows instead of staged.

`FrameJoinProcessor` is `pipelines.job.join_state.JoinProcessor` (same slots, same state in RocksDB, same window
kinds and join types) with three differences. Its event-time clock is Spark's watermark (the minimum over the
inputs' `withWatermark`, each `allowed_lateness_ms` behind its stream's newest event time, recorded with the
batch's offsets so a replay judges alike). Its results and refused rows are the query's output rows
(`result_rows`), which the user writes with any sink. And a timer one millisecond past the watermark wakes each
slot in the batches Spark runs only to advance the watermark, so outer, semi, anti and as-of rows are emitted when
the watermark passes them, not only when new data comes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming import StatefulProcessorHandle

from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.frames.result_rows import flat_rows
from windjoin.pipelines.job.adapter import Adapter, field_column
from windjoin.pipelines.job.join_state import JoinProcessor
from windjoin.pipelines.job.slot_batch import DEAD_COLUMNS, SlotBatch
from windjoin.pipelines.job.slot_output import current_batch_id, result_tables


class FrameJoinProcessor(JoinProcessor):
    def __init__(self, spec: JoinSpec, slot_labels: tuple[int, ...], job_key: str) -> None:
        # job_key names this query's cache of decoded windows (`window_cache`); moves and spills are not used
        super().__init__(spec, slot_labels, move_root=job_key, spill_root=job_key)
        self.dead_columns = [
            *DEAD_COLUMNS,
            "ts",
            *(field_column(n, f) for n, s in spec.streams.items() for f in s.fields),
        ]
        self._rows: pa.Table | None = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.handle = handle

    def take_clock(self, batch: SlotBatch, timer_values: Any) -> None:
        watermark = int(timer_values.getCurrentWatermarkInMs())
        batch.clock = {**batch.clock, "watermark": watermark if watermark > 0 else None}

    def emit(
        self, index: int, pairs_by_task: dict[str, list[pa.Table]], dead_rows: pa.Table, emitted_at: int
    ) -> dict[str, Any]:
        batch_id = current_batch_id()
        tables, _ = result_tables(self.spec, batch_id, pairs_by_task, emitted_at)
        self._rows = flat_rows(self.spec, tables, dead_rows, batch_id, emitted_at)
        return {}

    def output(self, slot: int, stats: dict[str, Any]) -> Iterator[pd.DataFrame]:
        self._wake_past(stats.get("watermark"))
        rows, self._rows = self._rows, None
        if rows is not None and rows.num_rows:
            yield rows.to_pandas()

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        """A batch that only advanced the watermark: the slot runs on its control row alone."""
        slot = int(key[0])
        control = Adapter(self.spec, self.initial_routing, tuple(self.slot_index)).control_rows(
            ControlEpoch(self.initial_routing)
        )
        rows = pa.Table.from_batches([control]).filter(pc.equal(control.column("slot"), slot))
        yield from self.join_pieces(slot, rows, timerValues)

    def _wake_past(self, watermark: int | None) -> None:
        """One timer per slot, a millisecond past the watermark the slot joined at: it fires once Spark's watermark
        moves on (its timers fire in that batch, after the slots that got rows ran)."""
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer((watermark or 0) + 1)
