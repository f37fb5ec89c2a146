"""The symmetric sliding-window join of a spec's tasks, chunk by chunk, over windows shared between tasks.

Each chunk is appended to its streams' windows first (but probe-only rows, see `Arrivals.stored`); then every
tuple probes the opposite window for partners that arrived before it (so a pair whose two tuples share a chunk
is found once, by the later one) and that are inside its window: lower <= second.ts - first.ts <= upper in the
task's join order (time; `size_ms` is the bounds [-size_ms, size_ms]) or among the opposite
stream's `size` most recent arrivals (count). Time windows refuse tuples older than the running maximum event time minus
`allowed_lateness_ms` (reported as late), which is what makes dropping expired blocks exact. A caller that reads
several input partitions (the Spark job) gives the watermark instead (`set_watermark`): the minimum over its input
partitions' newest event times less the lateness, so a tuple in order within its own partition is never late
however far other partitions have run ahead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from windjoin.operators.asof import AsofState
from windjoin.operators.batch import Arrivals, TupleBatch, check_arrival_order
from windjoin.operators.kernel import Probe, RangeFilter, probe_block
from windjoin.operators.lateness import in_arrival_order, running_max_late
from windjoin.operators.metrics import TaskCounters
from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.schema import StreamSchema
from windjoin.operators.spec import AS_OF_TYPES, JoinSpec, TaskSpec
from windjoin.operators.system_columns import SEQ, SSEQ, WSTART
from windjoin.operators.unpaired import Lone, below, close, first_pairs, mark_paired, recall_paired
from windjoin.operators.window import Block, WindowStore
from windjoin.operators.windows import ProbeView, WindowKind


@dataclass(frozen=True)
class Pairs:
    """One task's results for a chunk, in emission order (later arrival, then earlier arrival).

    `sides` maps each joined stream to the columns of its tuple in every pair (timestamp included); `windows`, for
    a kind whose tuples stand in windows of their own (tumbling, hopping), each pair's (window_start, window_end).
    """

    task: str
    sides: dict[str, dict[str, np.ndarray]]
    later_seq: np.ndarray
    earlier_seq: np.ndarray
    windows: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.later_seq)


@dataclass(frozen=True)
class ChunkResult:
    """What a chunk produced: pairs per task, per stream the chunk rows refused as late, and the rows outer, semi
    and anti tasks emit with one side alone (`unpaired.Lone`)."""

    pairs: list[Pairs]
    late: dict[str, np.ndarray]
    lone: list[Lone] = field(default_factory=list)


class _TaskRuntime:
    """A task's predicates turned toward each probing side, its time bounds, and its counters."""

    def __init__(self, spec: JoinSpec, task: TaskSpec) -> None:
        self.name = task.name
        self.streams = tuple(task.join)
        self.preds = {s: tuple(ProbePredicate.orient(p, s) for p in task.on) for s in self.streams}
        self.bounds = spec.bounds(task) if spec.window.event_time else None
        self.type = task.type
        self.tracked = task.tracked
        self.copies = spec.window.copies  # a tuple stands in windows of its own: its copies share its seq
        self.counters = TaskCounters(tuples_in=dict.fromkeys(self.streams, 0))

    def opposite(self, stream: str) -> str:
        return self.streams[1] if stream == self.streams[0] else self.streams[0]

    def arrived(self, batches: Mapping[str, TupleBatch]) -> Iterator[tuple[str, TupleBatch]]:
        """Each of the task's streams with tuples in this chunk, and those tuples (counted as the task's input)."""
        for stream in self.streams:
            probes = batches.get(stream)
            if probes is None or len(probes) == 0:
                continue
            self.counters.tuples_in[stream] += len(np.unique(probes.seq)) if self.copies else len(probes)
            yield stream, probes


class WindowJoin:
    """Runs all tasks of a spec; feed it chunks in arrival order with `process`."""

    n_way = False  # tasks of more than two streams need MJoin (operators/mjoin.py)

    def __init__(self, spec: JoinSpec, use_indexes: bool = True, keep_partners: bool = False) -> None:
        """`keep_partners`: keep the partners of outer, semi and anti tasks' tuples until those close
        (`JoinSpec.recall_history_ms`), so a window rebuilt from its stored tuples can `recall_flags`."""
        wide = [t.name for t in spec.tasks if len(t.join) != 2]
        if wide and not self.n_way:
            raise ValueError(f"task(s) {wide} join more than two streams; WindowJoin joins pairs (use MJoin)")
        self.spec = spec
        self.use_indexes = use_indexes
        self.tasks = [_TaskRuntime(spec, t) for t in spec.tasks]
        joined = {s for t in spec.tasks for s in t.join}
        self.stores = {
            name: WindowStore(
                spec.window,
                lateness_ms=spec.allowed_lateness_ms,
                history_ms=(spec.recall_history_ms(name) if keep_partners else spec.history_ms(name))
                if spec.window.event_time
                else None,
            )
            for name in spec.streams
            if name in joined
        }
        self._next_seq = 0
        self._max_ts: int | None = None
        self._given_watermark = False  # set_watermark was called: lateness follows the caller's watermark
        self._watermark: int | None = None
        self._lone: list[Lone] = []  # closed unpaired rows not yet handed out (see `_close`)
        self.keep_partners = keep_partners
        self.asof = {
            t.name: AsofState(t, self._empty_batches(tuple(t.join))) for t in spec.tasks if t.type in AS_OF_TYPES
        }

    @property
    def kind(self) -> WindowKind:
        return self.spec.window

    @property
    def counters(self) -> dict[str, TaskCounters]:
        return {t.name: t.counters for t in self.tasks}

    @property
    def max_event_ts(self) -> int | None:
        """The largest event time accepted so far (None before any tuple)."""
        return self._max_ts

    @property
    def watermark_ms(self) -> int | None:
        """Event time below which a tuple is late (event-time windows), or None before any tuple (or watermark)."""
        if not self.kind.event_time:
            return None
        if self._given_watermark:
            return self._watermark
        return None if self._max_ts is None else self._max_ts - self.spec.allowed_lateness_ms

    def set_watermark(self, watermark_ms: int | None) -> None:
        """Judge lateness and expire against the caller's watermark from now on (it never moves back), not
        against this join's own newest tuple: the caller sees every input partition, this join only its tuples."""
        self._given_watermark = True
        if watermark_ms is not None:
            self._watermark = watermark_ms if self._watermark is None else max(self._watermark, watermark_ms)
        self._close(self.watermark_ms)
        self._expire(self.watermark_ms)

    def preload(self, stream: str, columns: Mapping[str, np.ndarray]) -> None:
        """Store one stream's tuples in its window without probing them (warming a window)."""
        self.preload_arrivals({stream: Arrivals(columns, np.arange(len(next(iter(columns.values())))))})

    def preload_arrivals(self, chunk: Mapping[str, Arrivals]) -> None:
        """Store a chunk's tuples in their windows without probing them, numbered in the chunk's arrival order
        across its streams (restoring stored state: a count window's `recall_flags` reads that order)."""
        total = check_arrival_order(chunk)
        now = np.full(total, time.time_ns(), dtype=np.int64)
        stamped = {}
        for stream, arrivals in chunk.items():
            tuples = stamped[stream] = self._stamp(stream, arrivals.columns, arrivals.order, now[: len(arrivals)])
            if len(tuples):
                self._max_ts = max(self._max_ts or 0, int(tuples.ts.max()))
            self.stores[stream].append(tuples)
        for name, state in self.asof.items():  # the as-of tasks' tuples, waiting or versions, again
            left, right = self.spec.task(name).join
            state.add(stamped.get(left), stamped.get(right))
        self._next_seq += total

    def advance_event_time(self, max_ts: int) -> None:
        """Raise the running max event time (restoring a window whose newest tuples have expired)."""
        self._max_ts = max_ts if self._max_ts is None else max(self._max_ts, max_ts)

    def expire(self, horizon_watermark_ms: int | None) -> None:
        """Drop the blocks no tuple at or after `horizon_watermark_ms` can join: the caller knows no later tuple
        will be accepted below it (it is at most every later watermark), without judging lateness by it."""
        if horizon_watermark_ms is not None and self.kind.event_time:
            self._close(horizon_watermark_ms)
            self._expire(horizon_watermark_ms)

    def _expire(self, watermark_ms: int | None) -> None:
        if self.kind.counts_arrivals:
            for stream, first in self.first_kept().items():
                self.stores[stream].keep_from(first)
        else:
            for store in self.stores.values():
                store.expire(watermark_ms)

    def first_kept(self) -> dict[str, int]:
        """Count windows: per stream, the arrival number (sseq) of the oldest tuple its window must keep. The
        `size` newest; and with `keep_partners`, every partner an open tuple of an outer, semi or anti task may
        have paired with: the `size` partner arrivals before its stream's oldest open tuple, and all after."""
        size = self.spec.window.size
        first = {s: store.count - size for s, store in self.stores.items()}
        if not self.keep_partners:
            return first
        for task in self.tasks:
            for stream in task.tracked:
                own, partner = self.stores[stream], task.opposite(stream)
                oldest_open = own.seq_of(np.array([max(own.count - size, 0)]))
                partners_before = int(self.stores[partner].count_before(oldest_open)[0])
                first[partner] = min(first[partner], partners_before - size)
        return first

    def process(self, chunk: Mapping[str, Arrivals]) -> ChunkResult:
        """Join one chunk of arrivals; returns its pairs and the rows refused as late."""
        unknown = set(chunk) - set(self.spec.streams)
        if unknown:
            raise ValueError(f"unknown stream(s) {sorted(unknown)}; declared streams: {list(self.spec.streams)}")
        total = check_arrival_order(chunk)
        now = time.time_ns()
        accepted, late = self._split_late(chunk)
        batches, probe_only = {}, {}
        for stream, rows in accepted.items():
            if stream not in self.stores:
                continue  # a declared stream no task joins: nothing to store or probe
            arrivals = chunk[stream]
            order = arrivals.order[rows]
            arrival_ns = arrivals.arrival_ns[rows] if arrivals.arrival_ns is not None else np.full(len(rows), now)
            columns = {name: col[rows] for name, col in arrivals.columns.items()}
            batches[stream] = self._stamp(stream, columns, order, arrival_ns)
            if arrivals.stored is not None:  # in the stamped (arrival) order, as _stamp sorts
                probe_only[stream] = ~np.asarray(arrivals.stored, dtype=bool)[rows][np.argsort(order, kind="stable")]
        if probe_only and (self.kind.spreads is not None or self.n_way or self._tracking or self.asof):
            raise ValueError(
                "probe-only tuples need a two-stream inner join over a time window: an n-way combination's earlier "
                "tuples may be stored in different joins, an outer, semi or anti task must see every pair of the "
                "tuples it remembers, an as-of task keeps a key's versions in one join, and with a "
                f"{self.kind.kind} window {self.kind.spreads or 'they are fine'}"
            )
        counts_before = {s: store.count for s, store in self.stores.items()}
        for stream, tuples in batches.items():
            skip = probe_only.get(stream)
            self.stores[stream].append(tuples if skip is None else tuples.take(np.flatnonzero(~skip)))
        pairs = [self._join_task(task, batches, counts_before) for task in self.tasks]
        self._next_seq += total
        self._close(self.watermark_ms)
        self._expire(self.watermark_ms)
        pairs = [
            self._as_of(task, self.watermark_ms) if task.name in self.asof else p
            for task, p in zip(self.tasks, pairs, strict=True)
        ]
        lone, self._lone = self._lone, []
        return ChunkResult(pairs, late, lone)

    def finish(self) -> list[Lone]:
        """The input is complete: every tuple can pair no more; the unpaired rows of outer and anti tasks, and
        any closed since the last chunk (a spec with as-of tasks: `finish_chunk`, which has their pairs too)."""
        if self.asof:
            raise ValueError(f"as-of task(s) {list(self.asof)} emit pairs at the end: use finish_chunk")
        return self.finish_chunk().lone

    def finish_chunk(self) -> ChunkResult:
        """The input is complete: every tuple can pair no more; the unpaired rows of outer and anti tasks and any
        closed since the last chunk, and every as-of task's waiting tuples with their versions."""
        self._close(None, final=True)
        pairs = [self._as_of(task, np.inf) for task in self.tasks if task.name in self.asof]
        lone, self._lone = self._lone, []
        return ChunkResult(pairs, {}, lone)

    def _as_of(self, task: _TaskRuntime, watermark_ms: float | None) -> Pairs:
        """An as-of task's left tuples the watermark has passed, with their versions (`operators.asof`), emitted
        after the arrivals so far; those without one alone (asof_left)."""
        out = self.asof[task.name].emit(watermark_ms)
        after = self._next_seq - 1
        if task.type == "asof_left" and len(out.alone):
            rows = np.full(len(out.alone), after, dtype=np.int64)
            self._lone.append(
                Lone(task.name, task.streams, task.streams[0], dict(out.alone.columns), out.alone.seq, rows, True)
            )
        task.counters.outputs += len(out.left) + (len(out.alone) if task.type == "asof_left" else 0)
        sides = {task.streams[0]: dict(out.left.columns), task.streams[1]: dict(out.right.columns)}
        return Pairs(task.name, sides, np.full(len(out.left), after, dtype=np.int64), out.right.seq)

    def _empty_batches(self, streams: tuple[str, ...]) -> dict[str, TupleBatch]:
        """No tuples of each stream, in its columns."""
        none = np.zeros(0, np.int64)
        schema = {s: StreamSchema(self.spec.streams[s]).to_columns([]) for s in streams}
        return {s: TupleBatch(schema[s], self.spec.streams[s].timestamp, none, none, none) for s in streams}

    @property
    def _tracking(self) -> bool:
        return any(task.tracked for task in self.tasks)

    def _close(self, watermark_ms: int | None, final: bool = False) -> None:
        """Deal with the tracked tuples that can pair no more (see `unpaired`), before expiry drops any: their
        unpaired rows wait in `_lone` for the next result."""
        after = self._next_seq - 1
        for task in self.tasks:
            if task.type == "semi":
                continue  # emitted at the first pair; nothing at the end
            for stream in task.tracked:
                store = self.stores[stream]
                closing = self._closed_by(task, stream, watermark_ms, final)
                if closing is None:
                    continue
                found = close(task.name, task.streams, stream, store, closing, after)
                if found is not None:
                    task.counters.outputs += len(found)
                    self._lone.append(self._windowed_lone(found))

    def _closed_by(
        self, task: _TaskRuntime, stream: str, watermark_ms: int | None, final: bool = False
    ) -> Callable[[Block], np.ndarray | None] | None:
        """The closing test of a tracked `stream` at `watermark_ms` (see `unpaired`; `final`: every tuple)."""
        if final:
            return below(SEQ, np.inf)
        first = stream == task.streams[0]
        limit = self.kind.closing(first, task.bounds, watermark_ms, self.stores[stream].count)
        return None if limit is None else below(*limit)

    def recall_flags(self, watermark_ms: int | None) -> None:
        """Set the flags of outer, semi and anti tasks on a window rebuilt from its stored tuples
        (`preload_arrivals`) as they stood when it last closed at `watermark_ms`: a tuple has paired exactly when
        a stored partner lies in its window and meets the task's predicates (both were stored, so the later one
        found the earlier; the join keeps partners long enough, `keep_partners`), and it was closed (its row
        emitted) exactly when `watermark_ms` had passed its window, or (count windows) `size` newer tuples of its
        stream had arrived. Tuples that came with their flags keep them. As-of tasks: the left tuples `watermark_ms`
        had passed were emitted, and the versions no later one reaches are forgotten."""
        for state in self.asof.values():
            state.recall(watermark_ms)
        if not self._tracking:
            return
        if not self.keep_partners:
            raise ValueError("recall_flags needs a join built with keep_partners=True")
        for task in self.tasks:
            for stream in task.tracked:
                partner = task.opposite(stream)
                counted = self.kind.counts_arrivals
                reach = self._count_reach(stream, partner) if counted else self._kind_reach(task, stream)
                recall_paired(
                    task.name, self.stores[stream], self.stores[partner], task.preds[stream], reach, self.use_indexes
                )
                if task.type == "semi":
                    continue
                closing = self._closed_by(task, stream, watermark_ms)
                if closing is not None:  # emitted before the rebuild
                    close(task.name, task.streams, stream, self.stores[stream], closing, -1)

    def _kind_reach(self, task: _TaskRuntime, stream: str) -> Callable[[Block], list[tuple[RangeFilter, ...]]]:
        """An event-time window's partners of a tracked tuple, as if it probed for them from `stream`."""
        first = stream == task.streams[0]

        def reach(block: Block) -> list[tuple[RangeFilter, ...]]:
            starts = block.tuples.columns.get(WSTART)
            return [(RangeFilter(*self.kind.partners(ProbeView(block.tuples.ts, starts, first, task.bounds))),)]

        return reach

    def _count_reach(self, stream: str, partner: str) -> Callable[[Block], list[tuple[RangeFilter, ...]]]:
        """A count window's partners of a tracked tuple: those that arrived after it while it was among its
        stream's `size` newest (before its stream's tuple `size` later), and those among the partner stream's
        `size` newest when it arrived."""
        size = self.spec.window.size
        own, partners = self.stores[stream], self.stores[partner]

        def reach(block: Block) -> list[tuple[RangeFilter, ...]]:
            seq, sseq = block.tuples.seq, block.tuples.sseq
            until = own.seq_of(sseq + size)
            before = partners.count_before(seq)
            return [(RangeFilter(SEQ, seq + 1, until - 1),), (RangeFilter(SSEQ, before - size, before - 1),)]

        return reach

    def _stamp(
        self, stream: str, columns: Mapping[str, np.ndarray], order: np.ndarray, arrival_ns: np.ndarray
    ) -> TupleBatch:
        """Tuples in arrival order with their global and per-stream arrival numbers; with a kind whose tuples stand
        in windows of their own, a copy per window (sharing the tuple's `seq`, each with its own `sseq`) whose
        window start is the column WSTART."""
        by_arrival = np.argsort(order, kind="stable")
        ts_field = self.spec.streams[stream].timestamp
        stamped = {name: np.asarray(col)[by_arrival] for name, col in columns.items()}
        if self.kind.copies:
            rows, stamped[WSTART] = self.kind.window_starts(stamped[ts_field])
            by_arrival = by_arrival[rows]
            stamped = {name: col[rows] if name != WSTART else col for name, col in stamped.items()}
        return TupleBatch(
            stamped,
            ts_field,
            self._next_seq + np.asarray(order, dtype=np.int64)[by_arrival],
            self.stores[stream].count + np.arange(len(by_arrival), dtype=np.int64),
            np.asarray(arrival_ns, dtype=np.int64)[by_arrival],
        )

    def _split_late(self, chunk: Mapping[str, Arrivals]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per stream, the chunk rows accepted and those late against the running max event time."""
        everything = {s: np.arange(len(a)) for s, a in chunk.items()}
        if not self.kind.event_time or not chunk:
            return everything, {s: np.zeros(0, dtype=np.int64) for s in chunk}
        streams = list(chunk)
        ts, owner, row = in_arrival_order(chunk, {s: self.spec.streams[s].timestamp for s in streams})
        if len(ts) == 0:
            return everything, {s: np.zeros(0, dtype=np.int64) for s in chunk}
        is_late, self._max_ts = running_max_late(ts, self._max_ts, self.spec.allowed_lateness_ms)
        if self._given_watermark:
            is_late = ts < (self._watermark if self._watermark is not None else np.iinfo(np.int64).min)
        accepted = {s: np.sort(row[(owner == i) & ~is_late]) for i, s in enumerate(streams)}
        late = {s: np.sort(row[(owner == i) & is_late]) for i, s in enumerate(streams)}
        return accepted, late

    def _join_task(self, task: _TaskRuntime, batches: dict[str, TupleBatch], counts_before: dict[str, int]) -> Pairs:
        if task.name in self.asof:  # its tuples wait for the watermark (`_as_of`)
            arrived = dict(task.arrived(batches))
            self.asof[task.name].add(arrived.get(task.streams[0]), arrived.get(task.streams[1]))
            return self._assemble(task, [])[0]
        parts = []
        for stream, probes in task.arrived(batches):
            other = task.opposite(stream)
            filters = self._filters(task, stream, probes, batches, counts_before)
            probe = Probe(dict(probes.columns), filters, task.preds[stream], self.use_indexes)
            for block in self.stores[other].blocks:
                found = probe_block(probe, block)
                task.counters.comparisons += found.comparisons
                if len(found.probe_rows):
                    parts.append((stream, probes.take(found.probe_rows), block.tuples.take(found.block_rows)))
        pairs, sides = self._assemble(task, parts)
        later_arrival = np.concatenate([p.arrival_ns for _, p, _ in parts]) if parts else np.zeros(0, np.int64)
        task.counters.delay.record(time.time_ns() - later_arrival)
        if task.type == "semi":
            first = first_pairs(task.name, task.streams, self.stores[task.streams[0]], sides[0], pairs.later_seq)
            if len(first):
                task.counters.outputs += len(first)
                self._lone.append(self._windowed_lone(first))
        else:
            for stream, side in zip(task.streams, sides, strict=True):
                if stream in task.tracked:
                    mark_paired(self.stores[stream], task.name, side.sseq)
        if task.type in ("semi", "anti"):
            return self._assemble(task, [])[0]  # the task emits no pairs
        task.counters.outputs += len(pairs)
        return pairs

    def _filters(
        self,
        task: _TaskRuntime,
        stream: str,
        probes: TupleBatch,
        batches: dict[str, TupleBatch],
        counts_before: dict[str, int],
    ) -> tuple[RangeFilter, ...]:
        """Stored partners must have arrived earlier and lie inside the probe's window."""
        inf = np.iinfo(np.int64).max
        earlier = RangeFilter(SEQ, np.full(len(probes), -inf), probes.seq - 1)
        seen = None
        if self.kind.counts_arrivals:
            other = task.opposite(stream)
            other_batch = batches.get(other)
            seen = np.full(len(probes), counts_before[other], dtype=np.int64)  # opposite arrivals before each probe
            if other_batch is not None:
                seen += np.searchsorted(other_batch.seq, probes.seq)
        view = ProbeView(probes.ts, probes.columns.get(WSTART), stream == task.streams[0], task.bounds, seen)
        return earlier, RangeFilter(*self.kind.partners(view))

    def _assemble(
        self, task: _TaskRuntime, parts: list[tuple[str, TupleBatch, TupleBatch]]
    ) -> tuple[Pairs, tuple[TupleBatch, ...]]:
        """The task's pairs in emission order, and each side's tuples in that order (join order of the task)."""
        left, right = task.streams
        if not parts:
            empty = self._empty_batches(task.streams)
            sides = {s: dict(batch.columns) for s, batch in empty.items()}
            none = np.zeros(0, np.int64)
            windows = (none, none) if self.kind.copies else None
            return Pairs(task.name, sides, none, none, windows), tuple(empty[s] for s in task.streams)
        by_side: dict[str, list[TupleBatch]] = {left: [], right: []}
        later, earlier = [], []
        for probe_stream, probed, stored in parts:
            by_side[probe_stream].append(probed)
            by_side[task.opposite(probe_stream)].append(stored)
            later.append(probed.seq)
            earlier.append(stored.seq)
        later_seq, earlier_seq = np.concatenate(later), np.concatenate(earlier)
        emit = np.lexsort((earlier_seq, later_seq))
        ordered = tuple(TupleBatch.concat(by_side[s]).take(emit) for s in task.streams)
        sides = {s: dict(side.columns) for s, side in zip(task.streams, ordered, strict=True)}
        windows = None
        if self.kind.copies:
            starts = [side.pop(WSTART) for side in sides.values()][0]
            windows = (starts, starts + self.kind.window_ms)
        return Pairs(task.name, sides, later_seq[emit], earlier_seq[emit], windows), ordered

    def _windowed_lone(self, lone: Lone) -> Lone:
        """Rows of one side alone with their window (kinds whose tuples stand in windows of their own)."""
        if not self.kind.copies:
            return lone
        columns = dict(lone.columns)
        starts = columns.pop(WSTART)
        return replace(lone, columns=columns, windows=(starts, starts + self.kind.window_ms))
