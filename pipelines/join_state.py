"""The stateful join inside Spark: one `transformWithStateInPandas` group per slot, windows kept as segments.

Per slot and batch: a handful of state calls, never one per row. The slot's accepted tuples of a batch are
appended as one Arrow IPC *segment* (MapState, keyed by segment id); a small metadata value (ValueState)
lists the live segments with the zone facts that decide their expiry, the per-partition event-time and
count positions, and a fresh nonce. The decoded windows (one `WindowJoin` per hash partition) stay cached
in the Python worker between batches; the cache is used only while its nonce equals the stored one, so a
batch replayed after a failure (state rolled back) rebuilds from the segments instead of seeing windows
that already hold the failed attempt's tuples.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from windjoin.connectors.result_table import ARROW_TYPES, EMITTED_AT
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import Pairs, WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.schema import LATE
from windjoin.operators.spec import CountWindow, JoinSpec
from windjoin.pipelines.adapter import PUNCTUATION, field_column
from windjoin.pipelines.slot_load import GroupLoadMeter

OUTPUT_DDL = "slot int, kind string, name string, payload binary"
PAIRS, DEAD, STATS = "pairs", "dead", "stats"
ORDER = ["ts", "topic", "kpartition", "koffset"]  # arrival order inside a batch: deterministic on replay
DEAD_COLUMNS = ["stream", "topic", "kpartition", "koffset", "reason", "detail"]


@dataclass
class SlotWindows:
    """A slot's decoded windows, one join per hash partition, valid for the state version `nonce`."""

    nonce: str
    joins: dict[int, WindowJoin] = field(default_factory=dict)
    # Per partition and stream, arrivals no longer held (expired before a rebuild): a store counts only what
    # it holds, the metadata counts every arrival, so count-window expiry stays in one numbering.
    forgotten: dict[int, dict[str, int]] = field(default_factory=dict)


# Lives in an importable module (not __main__) so Python workers keep it between batches.
_CACHE: dict[int, SlotWindows] = {}


def _new_meta() -> dict[str, Any]:
    return {"nonce": "", "next_segment": 0, "segments": [], "max_ts": {}, "counts": {}}


class JoinProcessor(StatefulProcessor):
    def __init__(self, spec: JoinSpec, slot_labels: tuple[int, ...] = ()) -> None:
        self.spec = spec
        # grouping-key value -> slot index, for the load reports (without labels a slot reports its key)
        self.slot_index = {label: i for i, label in enumerate(slot_labels)}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta_state = handle.getValueState("meta", "meta binary")
        self.segments = handle.getMapState("segments", "id long", "data binary")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        slot = int(key[0])
        frame = pd.concat(list(rows), ignore_index=True)
        started = time.perf_counter()
        meta = orjson.loads(self.meta_state.get()[0]) if self.meta_state.exists() else _new_meta()
        windows = self._windows(slot, meta)
        out: list[tuple[int, str, str, bytes]] = []
        punctuations = int((frame["reason"] == PUNCTUATION).sum())  # only counted: they close snapshots
        dead = frame[frame["reason"].notna() & (frame["reason"] != PUNCTUATION)]
        live = frame[frame["reason"].isna()].sort_values(ORDER, kind="stable")
        pairs_by_task: dict[str, list[pa.Table]] = {t.name: [] for t in self.spec.tasks}
        late_parts, kept_parts = [], []
        meter = GroupLoadMeter()
        for part, rows_p in live.groupby("part", sort=True):
            part_started = time.perf_counter()
            tables, late, kept = self._join_partition(windows, meta, int(part), rows_p)
            outputs = sum(len(table) for _, table in tables)
            meter.record(int(part), len(rows_p), outputs, time.perf_counter() - part_started)
            for task, table in tables:
                pairs_by_task[task].append(table)
            late_parts.append(late)
            kept_parts.append(kept)
        emitted_at = int(time.time() * 1000)
        for task, tables in pairs_by_task.items():
            if tables:
                table = pa.concat_tables(tables)
                table = table.append_column(EMITTED_AT, pa.array(np.full(len(table), emitted_at), pa.int64()))
                out.append((slot, PAIRS, task, _ipc(table)))
        dead_rows = pd.concat(
            [dead[DEAD_COLUMNS], *(p[DEAD_COLUMNS].assign(reason=LATE, detail=_LATE_DETAIL) for p in late_parts)]
        )
        if len(dead_rows):
            out.append((slot, DEAD, "", _ipc(pa.Table.from_pandas(dead_rows, preserve_index=False))))
        kept = pd.concat([live.iloc[:0], *kept_parts])
        self._store(meta, kept)
        self._expire(meta, windows)
        meta["nonce"] = windows.nonce = uuid.uuid4().hex
        self.meta_state.update((orjson.dumps(meta),))
        _CACHE[slot] = windows
        seconds = time.perf_counter() - started
        groups = meter.report(windows.joins, seconds)
        stats = {
            "slot_index": self.slot_index.get(slot, slot),
            "rows": len(frame),
            "joined": len(live),
            "dead": len(dead_rows),
            "punctuations": punctuations,
            "segments": len(meta["segments"]),
            "window_tuples": sum(groups["window_tuples"]),
            "state_bytes": sum(groups["state_bytes"]),
            "outputs": sum(groups["outputs"]),
            "seconds": seconds,
            "groups": groups,  # per hash partition, columns slot_load.GROUP_FIELDS
        }
        out.append((slot, STATS, "", orjson.dumps(stats)))
        yield pd.DataFrame(out, columns=["slot", "kind", "name", "payload"])

    def close(self) -> None:
        pass

    def _join_partition(
        self, windows: SlotWindows, meta: dict[str, Any], part: int, rows: pd.DataFrame
    ) -> tuple[list[tuple[str, pa.Table]], pd.DataFrame, pd.DataFrame]:
        """Join one partition's rows (in arrival order): its result tables, its late rows, the rows it kept."""
        join = windows.joins.setdefault(part, join_operator(self.spec))
        result = join.process(self._chunk(rows))
        streams = rows["stream"].to_numpy()
        late = sorted(
            int(i) for stream, late_rows in result.late.items() for i in np.flatnonzero(streams == stream)[late_rows]
        )
        self._note_positions(meta, part, join, windows.forgotten.get(part, {}))
        tables = [(pairs.task, self._pairs_table(pairs)) for pairs in result.pairs if len(pairs)]
        return tables, rows.iloc[late], rows.drop(rows.index[late])

    def _windows(self, slot: int, meta: dict[str, Any]) -> SlotWindows:
        """The cached windows if they match the stored state version, else rebuilt from the segments."""
        cached = _CACHE.get(slot)
        if cached is not None and cached.nonce == meta["nonce"]:
            return cached
        windows = SlotWindows(meta["nonce"])
        for segment in meta["segments"]:
            data = self.segments.getValue((segment["id"],))[0]
            table = pa.ipc.open_stream(data).read_all().to_pandas()
            for part, rows_p in table.groupby("part", sort=True):
                join = windows.joins.setdefault(int(part), join_operator(self.spec))
                for stream, rows_s in rows_p.groupby("stream", sort=True):
                    join.preload(stream, self._columns(rows_s, stream))
        for part, max_ts in meta["max_ts"].items():
            windows.joins.setdefault(int(part), join_operator(self.spec)).advance_event_time(max_ts)
        for part, counts in meta["counts"].items():
            stores = windows.joins.setdefault(int(part), join_operator(self.spec)).stores
            windows.forgotten[int(part)] = {s: n - stores[s].count for s, n in counts.items()}
        return windows

    def _columns(self, rows: pd.DataFrame, stream: str) -> dict[str, np.ndarray]:
        s = self.spec.streams[stream]
        columns = {s.timestamp: rows["ts"].to_numpy(dtype=np.int64)}
        for name, ftype in s.fields.items():
            values = rows[field_column(stream, name)]
            columns[name] = (
                values.to_numpy(dtype=object)
                if ftype == "string"
                else values.to_numpy(dtype={"int": np.int64, "float": np.float64, "bool": np.bool_}[ftype])
            )
        return columns

    def _chunk(self, rows: pd.DataFrame) -> dict[str, Arrivals]:
        streams = rows["stream"].to_numpy()
        order = np.arange(len(rows))
        return {
            stream: Arrivals(self._columns(rows[streams == stream], stream), order[streams == stream])
            for stream in self.spec.streams
            if (streams == stream).any()
        }

    def _pairs_table(self, pairs: Pairs) -> pa.Table:
        arrays, names = [], []
        for stream, columns in pairs.sides.items():
            s = self.spec.streams[stream]
            types = {s.timestamp: pa.int64(), **{f: ARROW_TYPES[t] for f, t in s.fields.items()}}
            children = [pa.array(columns[name], type=types[name]) for name in types]
            arrays.append(pa.StructArray.from_arrays(children, names=list(types)))
            names.append(stream)
        return pa.Table.from_arrays(arrays, names=names)

    def _note_positions(self, meta: dict[str, Any], part: int, join: WindowJoin, forgotten: dict[str, int]) -> None:
        key = str(part)
        if join.max_event_ts is not None:
            meta["max_ts"][key] = join.max_event_ts
        meta["counts"][key] = {s: store.count + forgotten.get(s, 0) for s, store in join.stores.items()}

    def _store(self, meta: dict[str, Any], kept: pd.DataFrame) -> None:
        """Append the batch's accepted tuples as one segment, with what decides its expiry per partition."""
        if kept.empty:
            return
        columns = ["part", "stream", "ts", *(c for c in kept.columns if "__" in c)]
        seg_id = meta["next_segment"]
        meta["next_segment"] += 1
        self.segments.updateValue((seg_id,), (_ipc(pa.Table.from_pandas(kept[columns], preserve_index=False)),))
        by_part = kept.groupby("part")
        meta["segments"].append(
            {
                "id": seg_id,
                "max_ts": {str(p): int(ts) for p, ts in by_part["ts"].max().items()},
                "ends": {str(p): {s: meta["counts"][str(p)][s] for s in g["stream"].unique()} for p, g in by_part},
            }
        )

    def _expire(self, meta: dict[str, Any], windows: SlotWindows) -> None:
        """Drop segments no future tuple of any of their partitions can join (the operator's own rule)."""
        window = self.spec.window
        live = []
        for segment in meta["segments"]:
            if isinstance(window, CountWindow):
                needed = any(
                    end > meta["counts"][p][s] - window.size
                    for p, ends in segment["ends"].items()
                    for s, end in ends.items()
                )
            else:
                needed = any(
                    ts >= meta["max_ts"][p] - self.spec.allowed_lateness_ms - window.size_ms
                    for p, ts in segment["max_ts"].items()
                )
            if needed:
                live.append(segment)
            else:
                self.segments.removeKey((segment["id"],))
        meta["segments"] = live


_LATE_DETAIL = "event time is over allowed_lateness_ms behind the latest event time of its partition"


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
