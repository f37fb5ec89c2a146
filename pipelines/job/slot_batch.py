"""A slot's rows of one batch, classified: tuples to join, dead letters, and the adapter's side rows.

The adapter (`pipelines.job.adapter`) sends a slot, besides its tuples, rows that only carry facts: the batch's
control epoch, shed counts, punctuations and the read tasks' timings; rows it refused arrive with their reason.
The live tuples are sorted into arrival order (deterministic on replay) and converted once to numpy columns per
stream. Everything stays Arrow until the join's numpy columns: no row passes through pandas.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.batch import Arrivals
from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.control.job_epoch import ControlEpoch
from windjoin.operators.control.slot_load import fine_bins
from windjoin.operators.join import Pairs
from windjoin.operators.result_table import WINDOW_COLUMNS, stream_struct
from windjoin.operators.spec import JoinSpec
from windjoin.operators.unpaired import Lone
from windjoin.pipelines.job.adapter import CONTROL, PUNCTUATION, SHED, TIMING
from windjoin.pipelines.job.stored_rows import operator_columns

ORDER = ["ts", "topic", "kpartition", "koffset"]  # arrival order inside a batch: deterministic on replay
DEAD_COLUMNS = ["stream", "topic", "kpartition", "koffset", "reason", "detail"]


@dataclass
class SlotBatch:
    """One batch's rows at a slot, by kind."""

    live: pa.Table  # tuples to join, in arrival order
    dead: pa.Table  # rows the adapter refused (DEAD_COLUMNS)
    epoch: ControlEpoch | None  # the batch's control epoch, if it came with one
    clock: dict[str, Any]  # its event-time plan: watermark, input partitions' marks before it, sequence, limit
    shed: dict[str, int]  # per stream, tuples shed before reaching the slot
    punctuations: int  # only counted: they close snapshots
    read_tasks: list[dict[str, Any]]  # the read tasks' timings (sent to the first slot)
    rows: int  # records read, each once (not side rows or a spread partition's probe-only copies)
    marks: dict[str, list[int]]  # per input (Kafka) partition, the oldest and newest event time of its rows here

    @classmethod
    def classify(cls, table: pa.Table, dead_columns: list[str] = DEAD_COLUMNS) -> SlotBatch:
        """`dead_columns`: what a refused row keeps (DEAD_COLUMNS: where to find the record, and why)."""
        kinds = pc.fill_null(table.column("reason"), "")
        live = _arrival_order(table.filter(pc.equal(kinds, "")))
        timings = table.filter(pc.equal(kinds, TIMING)).column("detail").to_pylist()
        control = table.filter(pc.equal(kinds, CONTROL)).column("detail").to_pylist()
        shed_rows = table.filter(pc.equal(kinds, SHED))
        detail = orjson.loads(control[0]) if control else None
        side = pc.is_in(kinds, pa.array(["", PUNCTUATION, SHED, CONTROL, TIMING]))
        probe_only = live.num_rows - pc.sum(live.column("stored")).as_py() if live.num_rows else 0
        shed = shed_rows.group_by("stream").aggregate([("koffset", "sum")]).to_pylist()
        return cls(
            live=live,
            dead=table.filter(pc.invert(side)).select(dead_columns),
            epoch=ControlEpoch.from_json(detail) if detail is not None else None,
            clock=(detail or {}).get("clock") or {},
            shed={str(r["stream"]): int(r["koffset_sum"]) for r in shed},
            punctuations=pc.sum(pc.equal(kinds, PUNCTUATION)).as_py() or 0,
            read_tasks=[orjson.loads(t) for t in timings],
            rows=table.num_rows - len(control) - len(timings) - shed_rows.num_rows - probe_only,
            marks=_input_marks(table),
        )


def _arrival_order(live: pa.Table) -> pa.Table:
    """The tuples sorted by ORDER (numpy's lexsort: half of Arrow's multi-key sort_by here)."""
    topics = pc.unique(live.column("topic")).sort()
    keys = [pc.index_in(live.column("topic"), value_set=topics) if c == "topic" else live.column(c) for c in ORDER]
    return live.take(np.lexsort([key.to_numpy() for key in reversed(keys)]))


def _input_marks(table: pa.Table) -> dict[str, list[int]]:
    """The oldest and newest event time of each input (Kafka) partition among the batch's rows of this slot."""
    rows = table.filter(pc.is_valid(table.column("ts")))
    if not rows.num_rows:
        return {}
    span = rows.group_by(["topic", "kpartition"]).aggregate([("ts", "min"), ("ts", "max")]).to_pylist()
    return {f"{r['topic']}:{int(r['kpartition'])}": [int(r["ts_min"]), int(r["ts_max"])] for r in span}


def rows_by_partition(parts: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each partition's row positions, in partition order, each in the rows' (arrival) order."""
    if not len(parts):
        return
    order = np.argsort(parts, kind="stable")
    values, starts = np.unique(parts[order], return_index=True)
    for part, rows in zip(values.tolist(), np.split(order, starts[1:]), strict=True):
        yield int(part), rows


class StreamColumns:
    """A batch's live rows as numpy columns per stream, converted once for all partitions."""

    def __init__(self, spec: JoinSpec, live: pa.Table) -> None:
        names = list(spec.streams)
        self.code = {name: i for i, name in enumerate(names)}
        streams = live.column("stream").to_numpy()
        self.stream_codes = np.full(len(live), -1, dtype=np.int64)
        self.rank = np.zeros(len(live), dtype=np.int64)  # a row's position among its stream's rows
        self.columns: dict[str, dict[str, np.ndarray]] = {}
        for name, code in self.code.items():
            mine = np.flatnonzero(streams == name)
            self.stream_codes[mine] = code
            self.rank[mine] = np.arange(len(mine))
            self.columns[name] = operator_columns(spec, live.take(pa.array(mine)), name)
        self.stored = live.column("stored").to_numpy().astype(bool)
        self.ts = live.column("ts").to_numpy().astype(np.int64)
        # each keyed row's FINE_DEPTH low mini bits (-1: a stream without a key), hashed once for the batch
        self.fine_bins = np.full(len(live), -1, dtype=np.int64)
        for name, code in self.code.items():
            key = spec.streams[name].key
            mine = np.flatnonzero(self.stream_codes == code)
            if key is not None and len(mine):
                self.fine_bins[mine] = fine_bins(self.columns[name][key], spec.partitions)

    def fine_in(self, rows: np.ndarray) -> np.ndarray:
        """Some rows' count by the FINE_DEPTH low mini bits of their key hash (keyed streams only)."""
        bins = self.fine_bins[rows]
        return np.bincount(bins[bins >= 0], minlength=1 << FINE_DEPTH)

    def fine_in_by_part(self, rows: np.ndarray, parts: np.ndarray) -> dict[int, np.ndarray]:
        """`fine_in` of each partition's rows among `rows` (`parts`: their partitions), in one pass."""
        bins = self.fine_bins[rows]
        keyed = bins >= 0
        found, codes = np.unique(parts[keyed], return_inverse=True)
        counts = np.zeros((len(found), 1 << FINE_DEPTH), dtype=np.int64)
        np.add.at(counts, (codes, bins[keyed]), 1)
        return dict(zip(found.tolist(), counts, strict=True))

    def chunk(self, rows: np.ndarray, extra: dict[str, np.ndarray] | None = None) -> dict[str, Arrivals]:
        """The operator's input for some rows (positions), per stream in arrival order; `extra` columns (one value
        per row of `rows`) go to every stream."""
        codes = self.stream_codes[rows]
        stored = self.stored[rows]
        spread = not stored.all()  # a spread partition: some rows only probe here
        out = {}
        for name, code in self.code.items():
            mask = codes == code
            if not mask.any():
                continue
            ranks = self.rank[rows[mask]]
            columns = {column: values[ranks] for column, values in self.columns[name].items()}
            columns.update({column: values[mask] for column, values in (extra or {}).items()})
            out[name] = Arrivals(
                columns,
                np.flatnonzero(mask),
                stored=stored[mask] if spread else None,
            )
        return out

    def late_rows(self, rows: np.ndarray, late: dict[str, np.ndarray]) -> np.ndarray:
        """Which of `rows` (positions in it, sorted) the operator refused as late, given per stream by rank."""
        streams = self.stream_codes[rows]
        return np.sort(
            np.concatenate(
                [np.zeros(0, np.int64)]
                + [np.flatnonzero(streams == self.code[s])[late_s] for s, late_s in late.items()]
            )
        )


def lone_table(spec: JoinSpec, lone: Lone) -> pa.Table:
    """An outer, semi or anti task's rows of one side alone (`unpaired.Lone`) in `pairs_table`'s layout, the
    task's other stream null."""
    arrays = []
    for stream in lone.join:
        struct = stream_struct(spec, stream)
        if stream == lone.stream:
            children = [pa.array(lone.columns[child.name], type=child.type) for child in struct]
            arrays.append(pa.StructArray.from_arrays(children, fields=list(struct)))
        else:
            arrays.append(pa.nulls(len(lone), type=struct))
    return _with_windows(pa.Table.from_arrays(arrays, names=list(lone.join)), lone.windows)


def pairs_table(spec: JoinSpec, pairs: Pairs) -> pa.Table:
    """A task's pairs as the Arrow table a slot hands over: one struct column per joined stream (its timestamp
    first, then its fields), in the layout of `operators.result_table` without `batch_id` and `emitted_at`."""
    arrays = []
    for stream, columns in pairs.sides.items():
        struct = stream_struct(spec, stream)
        children = [pa.array(columns[child.name], type=child.type) for child in struct]
        arrays.append(pa.StructArray.from_arrays(children, fields=list(struct)))
    return _with_windows(pa.Table.from_arrays(arrays, names=list(pairs.sides)), pairs.windows)


def _with_windows(table: pa.Table, windows: tuple[np.ndarray, np.ndarray] | None) -> pa.Table:
    """The rows' window columns appended (kinds whose tuples stand in windows of their own)."""
    for name, values in zip(WINDOW_COLUMNS, windows or (), strict=False):
        table = table.append_column(name, pa.array(values, pa.int64()))
    return table
