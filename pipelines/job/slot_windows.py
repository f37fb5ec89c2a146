"""A slot's decoded windows, kept between batches and valid for one state version (`nonce`).

Two layouts, chosen by the spec (`new_windows`):
- *pooled* (two-stream tasks over a time window, the common case): one `WindowJoin` for all the slot's partitions,
  each tuple keeping its partition in the `PART` column. A batch is joined in one pass, however many partitions
  the slot holds. It is exact because a keyed task is an equi-join on the key (tuples of different partitions
  never pair) and unkeyed streams all live in partition 0; the watermark, lateness and expiry are the slot's.
- *per partition* (count windows, n-way tasks): one join per hash partition, as count windows number the arrivals
  of each partition and MJoin keeps partial combinations per join.

The windows stay cached in the Python worker between batches; the cache is used only while its nonce equals the
stored one, so a batch replayed after a failure (state rolled back) rebuilds from the segments instead of seeing
windows that already hold the failed attempt's tuples. Another worker of the machine finds them in the shared
window files (`window_cache`). Partitions' positions (event-time high mark, arrival counts) are kept in the
slot's meta, so a rebuild, a hand-over and a push all number arrivals alike.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.control.slot_load import GroupLoadMeter, PartState, partition_state, pooled_state
from windjoin.operators.join import WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spec_support import pooled
from windjoin.pipelines.job.slot_batch import StreamColumns, lone_table, pairs_table, rows_by_partition
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.stored_rows import by_stream, operator_columns, preload
from windjoin.pipelines.job.window_cache import WindowFiles

PART = "@part"  # a pooled window's column of each tuple's hash partition ('@' keeps it apart from user fields)


@dataclass
class BatchJoin:
    """What joining a slot's batch gave: result tables per task, the live rows (positions) refused as late, and
    the per-partition measures for the load report."""

    tables: dict[str, list[pa.Table]]
    late: np.ndarray
    meter: GroupLoadMeter


class SlotWindows(ABC):
    """A slot's decoded windows for the state version `nonce` (see the module docstring for the two layouts)."""

    def __init__(self, spec: JoinSpec, nonce: str) -> None:
        self.spec = spec
        self.nonce = nonce

    @abstractmethod
    def join_batch(self, meta: SlotMeta, columns: StreamColumns, parts: np.ndarray) -> BatchJoin:
        """Join a batch's live rows (`parts`: each one's partition, in arrival order) and note positions in meta."""

    @abstractmethod
    def set_watermark(self, watermark: int | None) -> None:
        """Judge lateness by the batch's watermark (it never moves back) and expire what it allows."""

    @abstractmethod
    def expire(self, horizon: int | None) -> None:
        """Drop what no tuple at or after `horizon` can join."""

    @abstractmethod
    def load(self, rows: pa.Table) -> None:
        """Put stored-layout rows (of any partitions) into the windows without joining them."""

    @abstractmethod
    def add_rows(self, part: int, rows: pa.Table) -> None:
        """Take stored-layout rows of `part` handed over or brought back; the windows now count them as held."""

    @abstractmethod
    def forget(self, meta: SlotMeta, part: int) -> None:
        """Drop everything of `part`: its tuples and positions (it left this slot whole)."""

    @abstractmethod
    def rebuild(self, meta: SlotMeta, part: int, rows: Sequence[pa.Table]) -> None:
        """Partition `part`'s tuples made anew of the rows this slot still stores of it (its positions kept)."""

    @abstractmethod
    def restore_positions(self, meta: SlotMeta) -> None:
        """After loading every segment: the partitions' positions as the meta records them."""

    @abstractmethod
    def take_positions(self, meta: SlotMeta, part: int, positions: list[dict[str, Any]]) -> None:
        """Merge handed-over positions into this slot's: the larger event-time high mark and arrival counts."""

    @abstractmethod
    def recall_flags(self, watermark: int | None) -> None:
        """After loading stored rows: which tuples paired and which closed by `watermark` (outer, semi and anti
        tasks; `WindowJoin.recall_flags`); tuples that kept their flags in memory are unchanged."""

    @abstractmethod
    def held(self) -> dict[int, PartState]:
        """What the windows hold of each partition."""

    def first_kept(self, meta: SlotMeta) -> dict[str, dict[str, int]]:
        """Count windows: per partition and stream, the arrival number (as the meta counts) of the oldest tuple
        still needed (`WindowJoin.first_kept`); segments holding none of those expire. Time windows: none."""
        return {}

    def still_held(self, rows: pa.Table) -> np.ndarray:
        """Which stored-layout rows the windows hold however old (as-of tasks' waiting tuples and versions), so a
        segment expiring by time keeps them. None here."""
        return np.zeros(rows.num_rows, dtype=bool)


def new_windows(spec: JoinSpec, nonce: str) -> SlotWindows:
    """Empty windows in the layout the spec allows (see the module docstring)."""
    return PooledWindows(spec, nonce) if pooled(spec) else PartitionWindows(spec, nonce)


def _row_keys(spec: JoinSpec, stream: str, columns: Mapping[str, np.ndarray]) -> Iterator[tuple]:
    """Each tuple's partition and values, as one hashable key."""
    names = [PART, spec.streams[stream].timestamp, *spec.streams[stream].fields]
    return zip(*(np.asarray(columns[n]).tolist() for n in names), strict=True)


def _merge_positions(meta: SlotMeta, part: int, positions: list[dict[str, Any]]) -> None:
    key = str(part)
    max_ts = [p["max_ts"] for p in positions if p["max_ts"] is not None]
    if key in meta.max_ts:
        max_ts.append(meta.max_ts[key])
    counts = dict(meta.counts.get(key, {}))
    for p in positions:
        for stream, n in p["counts"].items():
            counts[stream] = max(counts.get(stream, 0), n)
    if max_ts:
        meta.max_ts[key] = max(max_ts)
    meta.counts[key] = counts


class PooledWindows(SlotWindows):
    """One join over all the slot's partitions (two-stream tasks, time window)."""

    def __init__(self, spec: JoinSpec, nonce: str) -> None:
        super().__init__(spec, nonce)
        self.join = WindowJoin(spec, keep_partners=spec.tracking)
        self.streams = tuple(self.join.stores)

    def join_batch(self, meta: SlotMeta, columns: StreamColumns, parts: np.ndarray) -> BatchJoin:
        meter = GroupLoadMeter()
        tables: dict[str, list[pa.Table]] = {t.name: [] for t in self.spec.tasks}
        if not len(parts):
            if self.spec.tracking or self.join.asof:  # rows the batch's watermark closes come out without input
                result = self.join.process({})
                for pairs in result.pairs:
                    if len(pairs):
                        tables[pairs.task].append(pairs_table(self.spec, pairs))
                for lone in result.lone:
                    tables[lone.task].append(lone_table(self.spec, lone))
            return BatchJoin(tables, np.zeros(0, np.int64), meter)
        rows = np.arange(len(parts))
        result = self.join.process(columns.chunk(rows, {PART: parts}))
        late = columns.late_rows(rows, result.late)
        outputs: dict[int, int] = {}
        for pairs in result.pairs:
            if len(pairs):
                tables[pairs.task].append(pairs_table(self.spec, pairs))
                found, counts = np.unique(next(iter(pairs.sides.values()))[PART], return_counts=True)
                for part, n in zip(found.tolist(), counts.tolist(), strict=True):
                    outputs[part] = outputs.get(part, 0) + n
        for lone in result.lone:
            tables[lone.task].append(lone_table(self.spec, lone))
        fine_in = columns.fine_in_by_part(rows, parts)
        for part, part_rows in rows_by_partition(parts):
            meter.record(part, len(part_rows), outputs.get(part, 0), 0.0, 0.0, fine_in.get(part))
        self._note_positions(meta, columns, parts, late)
        return BatchJoin(tables, late, meter)

    def _note_positions(self, meta: SlotMeta, columns: StreamColumns, parts: np.ndarray, late: np.ndarray) -> None:
        """Each partition's newest event time (every row read) and its stored arrivals per stream (late rows and a
        spread partition's probe-only copies are not stored)."""
        stored = columns.stored.copy()
        stored[late] = False
        ts = columns.ts
        for part, part_rows in rows_by_partition(parts):
            key = str(part)
            newest = int(ts[part_rows].max())
            meta.max_ts[key] = max(meta.max_ts.get(key, newest), newest)
            counts = meta.counts.setdefault(key, {})
            kept = part_rows[stored[part_rows]]
            codes = np.bincount(columns.stream_codes[kept], minlength=len(columns.code))
            for name in self.streams:
                counts[name] = counts.get(name, 0) + int(codes[columns.code[name]])

    def set_watermark(self, watermark: int | None) -> None:
        self.join.set_watermark(watermark)

    def expire(self, horizon: int | None) -> None:
        self.join.expire(horizon)

    def load(self, rows: pa.Table) -> None:
        for stream, rows_s in by_stream(rows):
            columns = operator_columns(self.spec, rows_s, stream)
            columns[PART] = rows_s.column("part").to_numpy().astype(np.int32)
            self.join.preload(stream, columns)

    def add_rows(self, part: int, rows: pa.Table) -> None:
        self.load(rows)

    def _drop(self, part: int) -> None:
        for store in self.join.stores.values():
            store.drop_where(PART, part)
        for state in self.join.asof.values():
            state.drop_where(PART, part)

    def still_held(self, rows: pa.Table) -> np.ndarray:
        """Which stored-layout rows the as-of tasks still hold (waiting left tuples, versions), however old: a
        row is held when one of theirs has its partition and every value."""
        held = np.zeros(rows.num_rows, dtype=bool)
        streams = rows.column("stream").to_numpy(zero_copy_only=False)
        for name, state in self.join.asof.items():
            for stream, tuples in zip(self.spec.task(name).join, (state.waiting, state.versions), strict=True):
                at = np.flatnonzero(streams == stream)
                if not len(at) or not len(tuples):
                    continue
                stored = operator_columns(self.spec, rows.take(at), stream)
                stored[PART] = rows.column("part").to_numpy()[at]
                kept = set(_row_keys(self.spec, stream, tuples.columns))
                held[at[[key in kept for key in _row_keys(self.spec, stream, stored)]]] = True
        return held

    def forget(self, meta: SlotMeta, part: int) -> None:
        meta.max_ts.pop(str(part), None)
        meta.counts.pop(str(part), None)
        self._drop(part)

    def rebuild(self, meta: SlotMeta, part: int, rows: Sequence[pa.Table]) -> None:
        self._drop(part)
        for rows_s in rows:
            self.load(rows_s)

    def restore_positions(self, meta: SlotMeta) -> None:
        if meta.max_ts:
            self.join.advance_event_time(max(meta.max_ts.values()))

    def take_positions(self, meta: SlotMeta, part: int, positions: list[dict[str, Any]]) -> None:
        _merge_positions(meta, part, positions)

    def recall_flags(self, watermark: int | None) -> None:
        self.join.recall_flags(watermark)

    def held(self) -> dict[int, PartState]:
        return pooled_state(self.join, PART)


class PartitionWindows(SlotWindows):
    """One join per hash partition (count windows number each partition's arrivals; MJoin's n-way tasks)."""

    def __init__(self, spec: JoinSpec, nonce: str) -> None:
        super().__init__(spec, nonce)
        self.joins: dict[int, WindowJoin] = {}
        # Per partition and stream, arrivals no longer held (expired before a rebuild): a store counts only what
        # it holds, the metadata counts every arrival, so count-window expiry stays in one numbering.
        self.forgotten: dict[int, dict[str, int]] = {}

    def _join(self, part: int) -> WindowJoin:
        if part not in self.joins:
            self.joins[part] = join_operator(self.spec, keep_partners=self.spec.tracking)
        return self.joins[part]

    def join_batch(self, meta: SlotMeta, columns: StreamColumns, parts: np.ndarray) -> BatchJoin:
        meter = GroupLoadMeter()
        tables: dict[str, list[pa.Table]] = {t.name: [] for t in self.spec.tasks}
        late_rows = []
        for part, rows in rows_by_partition(parts):
            started, cpu_started = time.perf_counter(), time.thread_time()
            join = self._join(part)
            join.set_watermark(meta.watermark)
            result = join.process(columns.chunk(rows))
            self._note_positions(meta, part)
            found = [(pairs.task, pairs_table(self.spec, pairs)) for pairs in result.pairs if len(pairs)]
            late_rows.append(rows[columns.late_rows(rows, result.late)])
            wall, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
            meter.record(part, len(rows), sum(len(t) for _, t in found), wall, cpu, columns.fine_in(rows))
            for task, table in found:
                tables[task].append(table)
            for lone in result.lone:  # count windows close a tuple as its own stream's newer tuples arrive
                tables[lone.task].append(lone_table(self.spec, lone))
        return BatchJoin(tables, np.sort(np.concatenate([np.zeros(0, np.int64), *late_rows])), meter)

    def _note_positions(self, meta: SlotMeta, part: int) -> None:
        """Record `part`'s positions after joining: its event-time high mark and every arrival so far."""
        join, forgotten = self.joins[part], self.forgotten.get(part, {})
        if join.max_event_ts is not None:
            meta.max_ts[str(part)] = join.max_event_ts
        meta.counts[str(part)] = {s: store.count + forgotten.get(s, 0) for s, store in join.stores.items()}

    def _recount(self, meta: SlotMeta, part: int) -> None:
        """What `part`'s window no longer holds of the arrivals the meta counts (after a rebuild or a hand-over)."""
        stores = self.joins[part].stores
        counts = meta.counts.get(str(part), {})
        self.forgotten[part] = {s: n - stores[s].count for s, n in counts.items()}

    def set_watermark(self, watermark: int | None) -> None:
        for join in self.joins.values():  # every partition's window expires, whether rows came for it or not
            join.set_watermark(watermark)

    def expire(self, horizon: int | None) -> None:
        for join in self.joins.values():
            join.expire(horizon)

    def load(self, rows: pa.Table) -> None:
        parts = rows.column("part")
        for part in sorted(pc.unique(parts).to_pylist()):
            preload(self.spec, self._join(part), rows.filter(pc.equal(parts, part)))

    def add_rows(self, part: int, rows: pa.Table) -> None:
        preload(self.spec, self._join(part), rows)
        forgotten = self.forgotten.setdefault(part, {})
        for count in pc.value_counts(rows.column("stream")).to_pylist():
            forgotten[count["values"]] = forgotten.get(count["values"], 0) - int(count["counts"])

    def forget(self, meta: SlotMeta, part: int) -> None:
        meta.max_ts.pop(str(part), None)
        meta.counts.pop(str(part), None)
        self.joins.pop(part, None)
        self.forgotten.pop(part, None)

    def rebuild(self, meta: SlotMeta, part: int, rows: Sequence[pa.Table]) -> None:
        join = self.joins[part] = join_operator(self.spec, keep_partners=self.spec.tracking)
        for rows_s in rows:  # segment by segment, in order: the window numbers its tuples as it takes them
            preload(self.spec, join, rows_s)
        if str(part) in meta.max_ts:
            join.advance_event_time(meta.max_ts[str(part)])
        self._recount(meta, part)

    def restore_positions(self, meta: SlotMeta) -> None:
        for part, max_ts in meta.max_ts.items():
            self._join(int(part)).advance_event_time(max_ts)
        for part in meta.counts:
            self._join(int(part))
            self._recount(meta, int(part))

    def take_positions(self, meta: SlotMeta, part: int, positions: list[dict[str, Any]]) -> None:
        join = self._join(part)
        _merge_positions(meta, part, positions)
        if str(part) in meta.max_ts:
            join.advance_event_time(meta.max_ts[str(part)])
        self._recount(meta, part)

    def recall_flags(self, watermark: int | None) -> None:
        for join in self.joins.values():
            join.recall_flags(watermark)

    def held(self) -> dict[int, PartState]:
        return {part: partition_state(join) for part, join in self.joins.items()}

    def first_kept(self, meta: SlotMeta) -> dict[str, dict[str, int]]:
        out = {}
        for part, join in self.joins.items():
            forgotten = self.forgotten.get(part, {})
            out[str(part)] = {s: first + forgotten.get(s, 0) for s, first in join.first_kept().items()}
        return out


# Lives in an importable module (not __main__) so Python workers keep it between batches.
_CACHE: dict[int, SlotWindows] = {}


def cached_windows(slot: int, nonce: str, files: WindowFiles) -> SlotWindows | None:
    """The slot's windows at state version `nonce` if this worker or another one of the machine kept them."""
    cached = _CACHE.get(slot)
    if cached is not None and cached.nonce == nonce:
        return cached
    shared = files.load(slot, nonce)  # left by another worker on this machine
    if isinstance(shared, SlotWindows) and shared.nonce == nonce:
        return shared
    return None


def keep_windows(slot: int, windows: SlotWindows, files: WindowFiles) -> None:
    """Keep the windows for the slot's next batch, in this worker and for the others of the machine."""
    _CACHE[slot] = windows
    files.store(slot, windows.nonce, windows)
