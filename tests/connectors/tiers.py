"""Both result tiers as the join job writes them, for tests of queries across the tier boundary."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.connectors.redis.retention import advance_snapshot
from windjoin.connectors.redis.sink import RedisSink
from windjoin.connectors.results.result_query import ResultStore
from windjoin.operators.query.cursors import CursorCodec
from windjoin.operators.spec import JoinSpec


@dataclass(frozen=True)
class TiersLayout:
    """What a test file's results look like: its spec and tasks (the first is the default task), how one batch of a
    task's results becomes a table, `table(task, batch, results, emitted_at)`, and what the test remembers of each
    result written, `record(task, batch, row, result, emitted_at)`."""

    spec: JoinSpec
    tasks: tuple[str, ...]
    table: Callable[[str, int, list[dict[str, Any]], int], pa.Table]
    record: Callable[[str, int, int, dict[str, Any], int], tuple]


class Tiers:
    """A Redis sink (trim=False) and a Parquet sink with snapshots under one namespace/folder, written like the
    join job does: every batch to both sinks, snapshots committed then recorded in Redis with advance_snapshot."""

    def __init__(self, redis_url: str, layout: TiersLayout, retain_ms: int = 100) -> None:
        self.layout = layout
        self.folder = Path(tempfile.mkdtemp(prefix="windjoin-tiers-"))
        self.namespace = f"test_{uuid.uuid4().hex}"
        self.retain_ms = retain_ms
        self.redis = RedisSink(redis_url, retain_ms, self.namespace, trim=False)
        self.parquet = ParquetSink(self.folder)
        self.snapshots = SnapshotStore(self.folder)
        self.written: list[tuple] = []  # layout.record of every result written, in writing order
        self.next_batch = 0
        self.cursors = CursorCodec.random()  # every store's: a cursor of one reads back in another

    def write(self, results_by_task: dict[str, list[dict[str, Any]]], emitted_at: int = 7) -> int:
        """Write one batch to both sinks; returns its batch id."""
        batch = self.next_batch
        self.next_batch += 1
        layout = self.layout
        tables = {task: layout.table(task, batch, results, emitted_at) for task, results in results_by_task.items()}
        self.parquet.write(batch, tables)
        self.redis.write(batch, tables)
        for task, results in results_by_task.items():
            self.written += [layout.record(task, batch, row, r, emitted_at) for row, r in enumerate(results)]
        return batch

    def write_batches(self, task: str, batches: list[tuple[list[dict[str, Any]], bool]]) -> None:
        """Write each (results, snapshot) of `task` in turn, committing a snapshot after those flagged."""
        for results, snapshot in batches:
            self.write({task: results})
            if snapshot:
                self.snapshot()

    def written_in(self, t_from: int, t_to: int) -> list[tuple]:
        """What was written with a result time in [t_from, t_to] (records start with it), sorted."""
        return sorted(w for w in self.written if t_from <= w[0] <= t_to)

    def snapshot(self, task: str | None = None, advance: bool = True) -> None:
        """Commit a snapshot of `task` (default: the first task) up to the last batch; with `advance`, record it in
        Redis so that Redis gives up the rows older than its max time less retain_ms."""
        task = self.layout.tasks[0] if task is None else task
        snap = self.snapshots.commit(task, self.next_batch - 1, "periodic", 1)
        if snap is not None and advance:
            cutoff = None if snap.max_time is None else snap.max_time - self.retain_ms
            advance_snapshot(self.redis.client, task, self.namespace, snap.id, snap.last_batch, cutoff)

    def store(self, redis: bool = True, parquet: bool = True) -> ResultStore:
        kw = self.redis.client.connection_pool.connection_kwargs
        redis_url = f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}" if redis else None
        parquet_path = str(self.folder) if parquet else None
        return ResultStore(self.layout.spec, redis_url, self.namespace, parquet_path, cursors=self.cursors)

    def close(self) -> None:
        for task in self.layout.tasks:
            self.redis.clear(task)
        self.redis.close()
        shutil.rmtree(self.folder, ignore_errors=True)
