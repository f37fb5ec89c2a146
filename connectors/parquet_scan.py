"""The first `n` result rows of a time span in Parquet result files, read a row group at a time.

Memory stays at one page: a row group's key and condition columns are read (only those leaves), its matching rows
compete with the best `n` found so far by their (result_time, batch_id, row) keys, and only the winners'
positions are kept; row groups whose statistics show every row later than the `n`-th best are skipped unread.
At the end the winners' output columns (only the leaves asked for) are read back, one row group at a time.
A row's number is its file's first row number (`row_starts`) plus its position in the file, as the rest of the
query code numbers them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from windjoin.operators.query.conditions import Condition
from windjoin.operators.query.fields import RESULT_TIME, ROW, Key
from windjoin.operators.query.order import FirstKeys, after_mask, before_mask
from windjoin.operators.query.selection import arrow_mask
from windjoin.operators.result_table import BATCH_ID, EMITTED_AT, stream_timestamps


def first_rows(
    files: Sequence[str],
    schema: pa.Schema,
    lower: int,
    upper: int,
    after: Key | None,
    conditions: Sequence[Condition],
    n: int,
    names: Sequence[str] | None,
    row_starts: Sequence[int] | None = None,
) -> list[tuple[Key, dict[str, Any]]]:
    """The first `n` rows (by key) of `files` with result time in [lower, upper], after `after`, meeting every
    condition, with their keys. `names`: the fields the caller will keep
    (None: whole rows); the rows hold at least those. `row_starts`: each file's first row number (a batch's
    pieces number their rows from `piece << PIECE_ROW_BITS`); none: 0."""
    if not files or n < 1:
        return []
    stamps = [(stream, f"{stream}.{ts}") for stream, ts in stream_timestamps(schema).items()]
    span = _span(stamps, lower, upper)
    wanted = [leaf for _, leaf in stamps] + [BATCH_ID]
    wanted += [c.field for c in conditions if c.field != RESULT_TIME]
    best = FirstKeys(n)
    pieces: dict[tuple[int, int], ds.Fragment] = {}
    dataset = ds.dataset(list(files), schema=schema, format="parquet")
    for f, fragment in enumerate(dataset.get_fragments()):
        fragment.ensure_complete_metadata()
        metadata = fragment.metadata
        first = 0 if row_starts is None else row_starts[f]
        offsets = first + np.concatenate([[0], np.cumsum([rg.num_rows for rg in fragment.row_groups])])
        for piece in fragment.split_by_row_group(span):
            (group,) = piece.row_groups
            worst = best.worst()
            if worst is not None and _earliest(metadata.row_group(group.id), stamps) > worst[0]:
                continue  # every row of the group comes after the n best so far
            table = piece.to_table(columns=_refs(wanted))
            if not table.num_rows:
                continue
            times = _times(table, stamps)
            rows = np.arange(offsets[group.id], offsets[group.id] + table.num_rows, dtype=np.int64)
            batches = table.column(BATCH_ID).to_numpy()
            mask = (times >= lower) & (times <= upper)
            if after is not None:
                mask &= after_mask(times, batches, rows, after)
            if worst is not None:
                mask &= before_mask(times, batches, rows, worst)  # only a smaller key can take a place
            for condition in conditions:
                if mask.any():
                    column = pa.array(times) if condition.field == RESULT_TIME else table.column(condition.field)
                    mask &= arrow_mask(column, condition)
            chosen = np.flatnonzero(mask)
            if len(chosen):
                best.offer(times[chosen], batches[chosen], rows[chosen], f, group.id, chosen)
                pieces[(f, group.id)] = piece
    return _read(best, pieces, schema, [s for s, _ in stamps], names)


def _span(stamps: list[tuple[str, str]], lower: int, upper: int) -> ds.Expression:
    """result time = max(t1, ..., tn) in [lower, upper] <=> every ti <= upper and some ti >= lower."""
    fields = [ds.field(*leaf.split(".")) for _, leaf in stamps]
    below = functools.reduce(operator.and_, [t <= upper for t in fields])
    return below & functools.reduce(operator.or_, [t >= lower for t in fields])


def _refs(leaves: Sequence[str]) -> dict[str, ds.Expression]:
    return {leaf: ds.field(*leaf.split(".")) for leaf in dict.fromkeys(leaves)}


def _times(table: pa.Table, stamps: list[tuple[str, str]]) -> np.ndarray:
    columns = [table.column(leaf) for _, leaf in stamps]
    return pc.max_element_wise(*columns).to_numpy().astype(np.int64, copy=False)


def _earliest(group: Any, stamps: list[tuple[str, str]]) -> float:
    """A lower bound of the result times in a row group from its statistics (-inf when they are missing)."""
    paths = {group.column(i).path_in_schema: i for i in range(group.num_columns)}
    bound = -np.inf
    for _, leaf in stamps:
        stats = group.column(paths[leaf]).statistics if leaf in paths else None
        if stats is None or not stats.has_min_max:
            return -np.inf
        bound = max(bound, stats.min)  # result time = the latest stamp >= each stream's smallest stamp
    return bound


def _read(
    best: FirstKeys,
    pieces: dict[tuple[int, int], ds.Fragment],
    schema: pa.Schema,
    streams: list[str],
    names: Sequence[str] | None,
) -> list[tuple[Key, dict[str, Any]]]:
    """The rows `best` holds, in key order: each row group's output leaves read once, only its winning rows kept."""
    leaves = [f"{s}.{child.name}" for s in streams for child in schema.field(s).type]
    if names is not None:
        leaves = [leaf for leaf in leaves if leaf in set(names)]
    out: list[tuple[Key, dict[str, Any]] | None] = [None] * len(best.keys)
    for file, group in {tuple(w) for w in best.where[:, :2].tolist()}:
        held = np.flatnonzero((best.where[:, 0] == file) & (best.where[:, 1] == group))
        table = pieces[(file, group)].to_table(columns=_refs([*leaves, EMITTED_AT]))
        picked = table.take(pa.array(best.where[held, 2])).to_pylist()
        for i, record in zip(held.tolist(), picked, strict=True):
            t, b, r = best.keys[i].tolist()
            row: dict[str, Any] = {}
            for leaf in leaves:
                stream, _, name = leaf.partition(".")
                row.setdefault(stream, {})[name] = record[leaf]
            row.update({BATCH_ID: b, ROW: r, EMITTED_AT: record[EMITTED_AT], RESULT_TIME: t})
            out[i] = ((t, b, r), row)
    return [item for item in out if item is not None]
