"""MJoin: the n-way symmetric sliding-window join, one window (and its indexes) per stream.

An arriving tuple starts a partial combination and probes the other streams' windows one by one (the probe
order is fixed per task or chosen per chunk, cheapest first); each probe keeps the stored tuples that arrived
before it, fit the window together with the tuples joined so far, and satisfy every predicate linking them.
So a combination is emitted once, by its last arrival: time windows need max(ts) − min(ts) <= size_ms, count
windows need each other tuple among the `size` most recent arrivals of its stream when the last one arrives.
Arrival numbering, lateness, window stores, expiry and counters are WindowJoin's: MJoin only replaces how a
task's results are found, so a 2-stream task gives exactly WindowJoin's pairs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from windjoin.operators.batch import TupleBatch
from windjoin.operators.join import WindowJoin, _TaskRuntime
from windjoin.operators.kernel import Probe, RangeFilter, probe_block
from windjoin.operators.probe_order import SelectivityOrder, check_fixed_orders, connecting
from windjoin.operators.schema import StreamSchema
from windjoin.operators.spec import JoinSpec
from windjoin.operators.window import SEQ, SSEQ, TS

_INF = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Combinations:
    """One task's results for a chunk, in emission order: by the last arrival, then by each stream's arrival.

    `sides` maps each joined stream to the columns of its tuple in every combination (timestamp included),
    `seqs` to those tuples' arrival numbers; `later_seq` is the last arrival's number. `windows`: none (n-way tasks
    join over time and count windows, whose results have no window of their own), as `Pairs.windows`.
    """

    task: str
    sides: dict[str, dict[str, np.ndarray]]
    seqs: dict[str, np.ndarray]
    later_seq: np.ndarray
    windows: None = None

    def __len__(self) -> int:
        return len(self.later_seq)


@dataclass(frozen=True)
class _Partial:
    """Partial combinations of one probing pass: row-aligned tuples per stream joined so far, their ts span."""

    tuples: dict[str, TupleBatch]
    last_seq: np.ndarray
    min_ts: np.ndarray
    max_ts: np.ndarray

    def __len__(self) -> int:
        return len(self.last_seq)

    def take(self, rows: np.ndarray) -> _Partial:
        return _Partial(
            {s: t.take(rows) for s, t in self.tuples.items()},
            self.last_seq[rows],
            self.min_ts[rows],
            self.max_ts[rows],
        )

    def extend(self, stream: str, rows: np.ndarray, found: TupleBatch) -> _Partial:
        """These partial rows, each joined with the matching found tuple of `stream`."""
        base = self.take(rows)
        ts = found.ts.astype(np.int64)
        return _Partial(
            {**base.tuples, stream: found},
            base.last_seq,
            np.minimum(base.min_ts, ts),
            np.maximum(base.max_ts, ts),
        )

    @staticmethod
    def concat(parts: Sequence[_Partial]) -> _Partial:
        first = parts[0]
        if len(parts) == 1:
            return first
        return _Partial(
            {s: TupleBatch.concat([p.tuples[s] for p in parts]) for s in first.tuples},
            np.concatenate([p.last_seq for p in parts]),
            np.concatenate([p.min_ts for p in parts]),
            np.concatenate([p.max_ts for p in parts]),
        )


class MJoin(WindowJoin):
    """Runs all tasks of a spec, any number of streams each; `process(chunk)` gives Combinations per task.

    `probe_order` fixes, per task name, the order its streams are probed in (an arriving tuple skips its own
    stream); tasks not named there are ordered per chunk by expected fan-out (see probe_order.py).
    """

    n_way = True

    def __init__(
        self, spec: JoinSpec, probe_order: Mapping[str, Sequence[str]] | None = None, use_indexes: bool = True
    ) -> None:
        super().__init__(spec, use_indexes)
        self.fixed_orders = check_fixed_orders(spec.tasks, probe_order or {})
        self._estimates = SelectivityOrder()

    def probe_order(self, task_name: str, arriving: str) -> list[str]:
        """The streams a tuple of `arriving` probes, in order, for this task (right now, for adaptive orders)."""
        task = self.spec.task(task_name)
        fixed = self.fixed_orders.get(task_name)
        if fixed is not None:
            return [s for s in fixed if s != arriving]
        return self._estimates.order(task.on, task.join, arriving, self.stores)

    def _join_task(
        self, task: _TaskRuntime, batches: dict[str, TupleBatch], counts_before: dict[str, int]
    ) -> Combinations:  # type: ignore[override]  # WindowJoin.process collects whatever a task returns
        found = []
        for stream, probes in task.arrived(batches):
            ts = probes.ts.astype(np.int64)
            partial = _Partial({stream: probes}, probes.seq, ts, ts)
            joined = [stream]
            for other in self.probe_order(task.name, stream):
                partial = self._probe(task, partial, joined, other, batches, counts_before)
                joined.append(other)
                if len(partial) == 0:
                    break
            if len(partial):
                found.append(partial)
                task.counters.delay.record(time.time_ns() - partial.tuples[stream].arrival_ns)
        result = self._assemble_combinations(task, found)
        task.counters.outputs += len(result)
        return result

    def _probe(
        self,
        task: _TaskRuntime,
        partial: _Partial,
        joined: list[str],
        other: str,
        batches: dict[str, TupleBatch],
        counts_before: dict[str, int],
    ) -> _Partial:
        """Extend each partial combination by every fitting tuple in `other`'s window."""
        preds = connecting(self.spec.task(task.name).on, joined, other)
        columns = {}
        for pred in preds:
            stream, field = pred.probe_field.split(".")
            columns[pred.probe_field] = partial.tuples[stream].columns[field]
        probe = Probe(columns, self._window_filters(partial, other, batches, counts_before), preds, self.use_indexes)
        parts = []
        for block in self.stores[other].blocks:
            matches = probe_block(probe, block)
            task.counters.comparisons += matches.comparisons
            if len(matches.probe_rows):
                parts.append(partial.extend(other, matches.probe_rows, block.tuples.take(matches.block_rows)))
        return _Partial.concat(parts) if parts else partial.take(np.zeros(0, dtype=np.int64))

    def _window_filters(
        self, partial: _Partial, other: str, batches: dict[str, TupleBatch], counts_before: dict[str, int]
    ) -> tuple[RangeFilter, ...]:
        """A stored tuple must precede the last arrival and fit the window with every tuple joined so far."""
        earlier = RangeFilter(SEQ, np.full(len(partial), -_INF), partial.last_seq - 1)
        window = self.spec.window
        if window.counts_arrivals:
            seen = np.full(len(partial), counts_before[other], dtype=np.int64)  # arrivals before the last one
            other_batch = batches.get(other)
            if other_batch is not None:
                seen += np.searchsorted(other_batch.seq, partial.last_seq)
            return earlier, RangeFilter(SSEQ, seen - window.size, np.full(len(partial), _INF))
        size = window.bounds[1]  # n-way tasks take a symmetric window (JoinSpec checks)
        return earlier, RangeFilter(TS, partial.max_ts - size, partial.min_ts + size)

    def _assemble_combinations(self, task: _TaskRuntime, found: list[_Partial]) -> Combinations:
        if not found:
            sides = {s: StreamSchema(self.spec.streams[s]).to_columns([]) for s in task.streams}
            empty = np.zeros(0, dtype=np.int64)
            return Combinations(task.name, sides, dict.fromkeys(task.streams, empty), empty)
        every = _Partial.concat(found)
        seqs = {s: every.tuples[s].seq for s in task.streams}
        emit = np.lexsort([*(seqs[s] for s in reversed(task.streams)), every.last_seq])
        return Combinations(
            task.name,
            {s: {name: col[emit] for name, col in every.tuples[s].columns.items()} for s in task.streams},
            {s: seq[emit] for s, seq in seqs.items()},
            every.last_seq[emit],
        )


def join_operator(spec: JoinSpec, keep_partners: bool = False) -> WindowJoin:
    """The operator a spec needs: MJoin when a task joins more than two streams (inner only), else the (leaner)
    WindowJoin (`keep_partners`: see there)."""
    return MJoin(spec) if any(len(t.join) > 2 for t in spec.tasks) else WindowJoin(spec, keep_partners=keep_partners)
