"""One join per hash partition (a partition group), whose memory-resident state can be pushed to disk by
generations and cleaned up exactly.

Each group runs its own operator (`join_operator(spec)`, as the Spark job keeps one per partition) over the
group's tuples in arrival order, with the group's own lateness. Pushing a group writes its memory generation
(every stream's stored tuples) as immutable files and starts a new, empty generation that inherits the group's
event time, so the tuples it accepts or refuses are exactly those of a run without pushes. Results found within
one generation are emitted at once; results mixing generations are found by `cleanup` (operators/spill/cleanup.py).

What a generation must keep for the clean-up, with time windows (size W): a tuple of generation g can complete a
missing result only with tuples within W of it. Tuples that expire from g's window before g is pushed cannot meet
any later tuple, so the pushed window is all later generations need; but they can meet an older generation's
tuple when their time is at most H_g = (latest time pushed before g started) + W. Such tuples are kept aside as
copies when they arrive (only while the group has pushed generations, and only up to H_g) and pushed with g.
Every tuple carries an arrival number (`ID`) across the grouped join, so a copy and its stored twin count once.
`ID` is an extra column of the arrivals: the operators store and emit every column they are given, and only the
spec's predicates read columns by name (results here drop it again).

Count windows are refused. Results within a generation would still be exact (a generation sees a suffix of its
group's arrivals), but the clean-up's terms rely on the window test not depending on arrival order, and a count
window's does: whether an older generation's tuple is in the window depends on which tuple of a combination
arrived last and on how many tuples of its stream arrived between them, across generations. That needs a
clean-up kernel over global per-stream positions (not the operator's, which numbers only what it stores).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from tqdm import tqdm

from windjoin.operators.batch import Arrivals, check_arrival_order
from windjoin.operators.join import Pairs, WindowJoin
from windjoin.operators.mjoin import Combinations, join_operator
from windjoin.operators.partitioning import partition_of
from windjoin.operators.spec import CountWindow, JoinSpec
from windjoin.operators.spill.chunks import split_by
from windjoin.operators.spill.cleanup import Columns, Generation, concat_columns, missing_results
from windjoin.operators.spill.stats import GroupStats, columns_bytes

ID = "@id"  # a tuple's arrival number over the grouped join ('@' keeps it apart from declared fields)

Results = list[Pairs | Combinations]


class GenerationFiles(Protocol):
    """Where pushed generations live (connectors.files.spill_files.SpillFiles)."""

    def write(self, part: int, gen: int, stream: str, columns: Mapping[str, np.ndarray]) -> object: ...

    def read(self, part: int, gen: int, stream: str) -> dict[str, np.ndarray] | None: ...

    def delete(self, part: int) -> None: ...


@dataclass
class PartitionGroup:
    """One partition's memory generation, its pushed generations' numbers and its statistics."""

    join: WindowJoin
    generation: int = 0  # number of the memory-resident generation
    pushed: list[int] = field(default_factory=list)  # numbers of the generations on disk, oldest first
    horizon_ts: int | None = None  # H_g: arrivals up to this time may join a pushed generation
    copies: dict[str, list[Columns]] = field(default_factory=dict)
    stats: GroupStats = field(default_factory=GroupStats)


@dataclass(frozen=True)
class GroupedResult:
    """What a chunk produced: results (per partition and task) and, per stream, the chunk rows refused as late."""

    results: Results
    late: dict[str, np.ndarray]

    @property
    def outputs(self) -> int:
        return sum(len(r) for r in self.results)


class GroupedJoin:
    """The partition groups of one slot: `process` chunks, `push` groups to disk, `cleanup` what was pushed."""

    def __init__(self, spec: JoinSpec, files: GenerationFiles | None = None) -> None:
        if isinstance(spec.window, CountWindow):
            raise ValueError(
                "window.kind: 'count' cannot be pushed to disk by generations (count positions span generations); "
                "accepted: 'time'"
            )
        keyed = {s: spec.streams[s].key for t in spec.tasks for s in t.join}
        if len({k is None for k in keyed.values()}) > 1:
            raise ValueError(f"streams.*.key: joined streams {sorted(keyed)} must all have a key or none")
        self.spec = spec
        self.files = files
        self.keys = keyed
        self.groups: dict[int, PartitionGroup] = {}
        self.now_ts: int | None = None  # T_c: the latest event time accepted by any group
        self._next_id = 0

    # -- normal run ---------------------------------------------------------------------------------------------

    def partitions_of(self, stream: str, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(columns.values())))
        key = self.keys.get(stream)
        if key is None:
            return np.zeros(n, dtype=np.int32)
        return partition_of(np.asarray(columns[key]), self.spec.partitions)

    def process(self, chunk: Mapping[str, Arrivals]) -> GroupedResult:
        """Join one chunk: each partition's rows go to its group's memory generation, in arrival order. Rows
        carrying an `ID` column keep it (a cluster numbers arrivals across slots); others are numbered here."""
        unknown = set(chunk) - set(self.spec.streams)
        if unknown:
            raise ValueError(f"unknown stream(s) {sorted(unknown)}; declared streams: {list(self.spec.streams)}")
        total = check_arrival_order(chunk)
        late = {s: np.zeros(0, dtype=np.int64) for s in chunk}
        numbered = {}
        for s, a in chunk.items():
            if s in self.keys and len(a) and ID not in a.columns:
                ids = self._next_id + np.asarray(a.order, dtype=np.int64)
                a = Arrivals({**a.columns, ID: ids}, a.order, a.arrival_ns)
            numbered[s] = a
        self._next_id += total
        parts = {s: self.partitions_of(s, a.columns) for s, a in numbered.items() if s in self.keys and len(a)}
        results: Results = []
        late_rows: dict[str, list[np.ndarray]] = {s: [] for s in parts}
        for part, (share, rows_of) in split_by(numbered, parts).items():
            found, refused = self._process_group(part, share)
            results.extend(found)
            for s, r in refused.items():
                if len(r):
                    late_rows[s].append(rows_of[s][r])
        for s, pieces in late_rows.items():
            if pieces:
                late[s] = np.sort(np.concatenate(pieces))
        return GroupedResult(results, late)

    def _process_group(self, part: int, sub: dict[str, Arrivals]) -> tuple[Results, dict[str, np.ndarray]]:
        group = self.groups.get(part)
        if group is None:
            group = self.groups[part] = PartitionGroup(join_operator(self.spec))
        result = group.join.process(sub)
        found = [_without_id(r) for r in result.pairs if len(r)]
        group.stats.outputs += sum(len(r) for r in found)
        newest = None
        for s, arrivals in sub.items():
            accepted = np.setdiff1d(np.arange(len(arrivals)), result.late.get(s, np.zeros(0, np.int64)))
            if len(accepted) == 0:
                continue
            ts = np.asarray(arrivals.columns[self.spec.streams[s].timestamp], dtype=np.int64)[accepted]
            group.stats.inserted_bytes += columns_bytes(arrivals.columns) * len(accepted) // len(arrivals)
            newest = int(ts.max()) if newest is None else max(newest, int(ts.max()))
            if group.horizon_ts is not None:
                keep = accepted[ts <= group.horizon_ts]
                if len(keep):
                    group.copies.setdefault(s, []).append({n: c[keep] for n, c in arrivals.columns.items()})
        if newest is not None:
            group.stats.last_insert_ts = newest
            self.now_ts = newest if self.now_ts is None else max(self.now_ts, newest)
        self._measure(group)
        return found, result.late

    def _measure(self, group: PartitionGroup) -> None:
        size = sum(columns_bytes(b.tuples.columns) for store in group.join.stores.values() for b in store.blocks)
        size += sum(columns_bytes(c) for parts in group.copies.values() for c in parts)
        group.stats.size_bytes = size

    # -- statistics ---------------------------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return sum(g.stats.size_bytes for g in self.groups.values())

    def stats(self) -> dict[int, GroupStats]:
        return {p: g.stats for p, g in self.groups.items()}

    # -- disk-based adaptation ----------------------------------------------------------------------------------

    def content(self, part: int) -> Generation:
        """The memory generation's tuples per stream that the clean-up may need: its window and its copies."""
        group = self.groups[part]
        out: Generation = {}
        for s, store in group.join.stores.items():
            pieces = [dict(b.tuples.columns) for b in store.blocks] + group.copies.get(s, [])
            if not pieces:
                continue
            merged = concat_columns(pieces)
            _, first = np.unique(merged[ID], return_index=True)
            out[s] = {n: c[np.sort(first)] for n, c in merged.items()}
        return out

    def push(self, parts: list[int]) -> int:
        """Write these groups' memory generations to disk and start new ones; returns the bytes freed."""
        if self.files is None:
            raise RuntimeError("pushing groups to disk needs generation files (GroupedJoin(spec, files))")
        freed = 0
        for part in parts:
            group = self.groups[part]
            content = self.content(part)
            if not content:
                continue
            for s, columns in content.items():
                self.files.write(part, group.generation, s, columns)
            freed += group.stats.size_bytes
            group.stats.pushed_bytes += group.stats.size_bytes
            newest = max(int(np.max(c[self.spec.streams[s].timestamp])) for s, c in content.items())
            horizon = newest + self.spec.window.size_ms
            max_ts = group.join.max_event_ts
            group.pushed.append(group.generation)
            group.generation += 1
            group.horizon_ts = horizon if group.horizon_ts is None else max(group.horizon_ts, horizon)
            group.copies = {}
            group.join = join_operator(self.spec)
            if max_ts is not None:
                group.join.advance_event_time(max_ts)
            group.stats.disk_generations = len(group.pushed)
            self._measure(group)
        return freed

    # -- relocation (distributed adaptation) --------------------------------------------------------------------

    def take_group(self, part: int) -> PartitionGroup:
        """Remove a group to hand it to another slot; a group with pushed generations stays (paper 004, sec. 6)."""
        group = self.groups[part]
        if group.pushed:
            raise ValueError(f"partition {part} has pushed generations {group.pushed}; pushed groups are not moved")
        return self.groups.pop(part)

    def install_group(self, part: int, group: PartitionGroup) -> None:
        if part in self.groups:
            raise ValueError(f"partition {part} is already held here")
        self.groups[part] = group

    # -- clean-up -----------------------------------------------------------------------------------------------

    def pushed_partitions(self) -> list[int]:
        return sorted(p for p, g in self.groups.items() if g.pushed)

    def cleanup(self, parts: list[int] | None = None, reinstate: bool = True, progress: bool = False) -> Results:
        """Merge every generation of these partitions (default: all with pushed generations) and return exactly
        the results no generation produced alone. `reinstate` keeps the merged window in memory as the group's
        new generation (clean-up while memory allows, the run goes on); without it the group's state is dropped
        (the end of a bounded run)."""
        if self.files is None:
            return []
        todo = self.pushed_partitions() if parts is None else parts
        results: Results = []
        for part in tqdm(todo, desc="clean-up", unit="group", disable=not progress):
            group = self.groups[part]
            gens = [self._read(part, g) for g in group.pushed] + [self.content(part)]
            found = [_without_id(r) for r in missing_results(self.spec, gens) if len(r)]
            group.stats.outputs += sum(len(r) for r in found)
            results.extend(found)
            max_ts = group.join.max_event_ts
            group.join = join_operator(self.spec)
            if max_ts is not None:
                group.join.advance_event_time(max_ts)
            if reinstate:
                self._reinstate(group, gens)
            group.pushed, group.horizon_ts, group.copies = [], None, {}
            group.stats.disk_generations = group.stats.pushed_bytes = 0
            self.files.delete(part)
            self._measure(group)
        return results

    def _read(self, part: int, gen: int) -> Generation:
        out = {}
        for s in self.spec.streams:
            columns = self.files.read(part, gen, s) if self.files is not None else None
            if columns is not None and len(columns[ID]):
                out[s] = columns
        return out

    def _reinstate(self, group: PartitionGroup, gens: list[Generation]) -> None:
        """Preload the tuples of all generations still inside the window, in arrival order."""
        watermark = group.join.watermark_ms
        for s in self.spec.streams:
            pieces = [g[s] for g in gens if s in g]
            if not pieces:
                continue
            merged = concat_columns(pieces)
            keep = np.argsort(merged[ID], kind="stable")
            if watermark is not None:
                ts = np.asarray(merged[self.spec.streams[s].timestamp], dtype=np.int64)[keep]
                keep = keep[ts >= watermark - self.spec.window.size_ms]
            if len(keep):
                group.join.preload(s, {n: c[keep] for n, c in merged.items()})


def _without_id(found: Pairs | Combinations) -> Pairs | Combinations:
    """The result with the internal arrival number dropped from every side."""
    sides = {s: {n: c for n, c in cols.items() if n != ID} for s, cols in found.sides.items()}
    return type(found)(**{**found.__dict__, "sides": sides})
