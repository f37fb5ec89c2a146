"""The first rows of a time span over units of stored results (Redis chunks, Parquet row groups), in
(result_time, batch_id, row) order, bounded in rows, bytes and time.

A unit knows a lower bound of its rows' result times (`lower`). Units are read in ascending `lower`, from both tiers
at once, so the read can stop early in two ways:
- complete: once the page is full (`n` rows, or its bytes) and the next unit's `lower` is past the page's last
  key, no unread row can take a place;
- at the deadline: every row with a result time below the next unit's `lower` (the *frontier*) has been read, so
  the rows before it are the first ones exactly, and the next page resumes at the frontier (at least the units
  at the span's start are read first, so every page moves on).
A `Group` stands for units not listed yet (an index step of Redis, a snapshot's files): it is expanded when it comes
first. Only the keys, the condition columns and a size per row are read at first; at the end the winners' output
columns are read back, one unit at a time.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.operators.query.conditions import Condition
from windjoin.operators.query.fields import RESULT_TIME, Key, result_rows
from windjoin.operators.query.order import FirstKeys, after_mask, before_mask
from windjoin.operators.query.selection import arrow_mask
from windjoin.operators.result_table import BATCH_ID, EMITTED_AT


@dataclass
class Part:
    """A unit's rows as read: `table` holds the columns asked for (`stream.field` leaves, `batch_id`,
    `emitted_at`), `rows` their row numbers, `sizes` each row's bytes of output values (None when not asked)."""

    table: pa.Table
    rows: np.ndarray
    sizes: np.ndarray | None = None


@runtime_checkable
class Leaf(Protocol):
    lower: int  # no row of the unit has an earlier result time

    def read(self, columns: Sequence[str], sized: Sequence[str] | None) -> Part:
        """The unit's rows: `columns`, and, given `sized` (output leaves), each row's bytes of them."""
        ...


@runtime_checkable
class Group(Protocol):
    lower: int

    def expand(self) -> Iterable[Leaf | Group]:
        """The units this one stands for (each with `lower` at or after this one's)."""
        ...


@dataclass
class Span:
    """What a scan looks for: rows with result time in [lower, upper] (their timestamp leaves `stamps`), strictly
    after `after`, meeting `conditions`; the first `n`, at most about `max_bytes` of them; the output leaves
    `leaves`."""

    stamps: list[str]
    lower: int
    upper: int
    after: Key | None
    conditions: Sequence[Condition]
    n: int
    max_bytes: int | None
    leaves: list[str]


@dataclass
class Found:
    """The first rows found with their keys, in key order; `cut`: rows were left out for the bytes; `frontier`:
    the read stopped at the deadline and only rows with result time below this are known to be the first."""

    keyed: list[tuple[Key, dict[str, Any]]]
    cut: bool
    frontier: int | None


def first_rows(units: Iterable[Leaf | Group], span: Span, deadline: float | None = None) -> Found:
    """The first rows of the span over `units` (see the module docstring); `deadline`: time.monotonic() by which
    to stop (None: none)."""
    counter = itertools.count()
    heap = [(unit.lower, next(counter), unit) for unit in units]
    heapq.heapify(heap)
    best = FirstKeys(span.n, span.max_bytes)
    read: list[Leaf] = []
    wanted = list(
        dict.fromkeys([*span.stamps, BATCH_ID, *(c.field for c in span.conditions if c.field != RESULT_TIME)])
    )
    frontier = None
    while heap:
        lower = heap[0][0]
        worst = best.worst()
        if worst is not None and lower > worst[0]:
            break
        if deadline is not None and read and lower > span.lower and time.monotonic() > deadline:
            frontier = lower
            break
        _, _, unit = heapq.heappop(heap)
        if isinstance(unit, Group):
            for inner in unit.expand():
                heapq.heappush(heap, (inner.lower, next(counter), inner))
            continue
        read.append(unit)
        _offer(best, unit.read(wanted, span.leaves), len(read) - 1, span, worst)
    keyed = _rows(best, read, span.leaves, span.stamps)
    if frontier is not None:
        keyed = [item for item in keyed if item[0][0] < frontier]
    return Found(keyed, best.cut, frontier)


def _offer(best: FirstKeys, part: Part, unit: int, span: Span, worst: Key | None) -> None:
    table = part.table
    if not table.num_rows:
        return
    times = pc.max_element_wise(*(table.column(s) for s in span.stamps)).to_numpy().astype(np.int64, copy=False)
    batches = table.column(BATCH_ID).to_numpy()
    mask = (times >= span.lower) & (times <= span.upper)
    if span.after is not None:
        mask &= after_mask(times, batches, part.rows, span.after)
    if worst is not None:
        mask &= before_mask(times, batches, part.rows, worst)  # only a smaller key can take a place
    for condition in span.conditions:
        if mask.any():
            column = pa.array(times) if condition.field == RESULT_TIME else table.column(condition.field)
            mask &= arrow_mask(column, condition)
    chosen = np.flatnonzero(mask)
    if len(chosen):
        assert part.sizes is not None
        best.offer(times[chosen], batches[chosen], part.rows[chosen], part.sizes[chosen], unit, chosen)


def _rows(best: FirstKeys, units: list[Leaf], leaves: list[str], stamps: list[str]) -> list[tuple[Key, dict[str, Any]]]:
    """The rows `best` holds, in key order: each unit's output leaves read once, only its winning rows kept, and
    made into row dicts by Arrow (one struct array per unit: a dict built per row in Python was a quarter of the
    proxy's CPU for 1 s spans). A stream whose timestamp is null is absent from the row (an outer, semi or anti
    task's row of the other side alone): None, not an object of nulls."""
    stamp_of = {stamp.partition(".")[0]: stamp for stamp in stamps}
    streams: dict[str, list[str]] = {}
    tops = [leaf for leaf in leaves if "." not in leaf]  # a row's own columns (window_start, window_end)
    for leaf in leaves:
        stream, dot, name = leaf.partition(".")
        if dot:
            streams.setdefault(stream, []).append(name)
    out: list[tuple[Key, dict[str, Any]] | None] = [None] * len(best.keys)
    for unit in np.unique(best.where[:, 0]).tolist():
        held = np.flatnonzero(best.where[:, 0] == unit)
        wanted = list(dict.fromkeys([*leaves, *(stamp_of[s] for s in streams), EMITTED_AT]))
        table = units[unit].read(wanted, None).table.take(pa.array(best.where[held, 1]))
        keys = best.keys[held]
        structs = {
            s: pa.StructArray.from_arrays(
                [table.column(f"{s}.{n}").combine_chunks() for n in names],
                names=names,
                mask=_absent(table.column(stamp_of[s])),
            )
            for s, names in streams.items()
        }
        structs |= {top: table.column(top).combine_chunks() for top in tops}
        emitted_at = table.column(EMITTED_AT).combine_chunks()
        rows = result_rows(structs, pa.array(keys[:, 1]), pa.array(keys[:, 2]), emitted_at, pa.array(keys[:, 0]))
        for i, key, row in zip(held.tolist(), keys.tolist(), rows, strict=True):
            out[i] = (tuple(key), row)
    return [item for item in out if item is not None]


def _absent(stamp: pa.ChunkedArray) -> pa.Array | None:
    """Where a stream's timestamp leaf is null, the stream is absent (None when it is present everywhere)."""
    return pc.is_null(stamp).combine_chunks() if stamp.null_count else None
