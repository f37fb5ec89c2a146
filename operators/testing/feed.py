"""A spec's join fed events in arrival order, chunk by chunk, its late events handed back as the caller's tags.

Each event carries a tag of the caller's (its position in a list, its line in a file), so the events the join
refuses as late come back as tags, whatever chunk they were in.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import ChunkResult, WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.results import lone_records, pair_records
from windjoin.operators.schema import RecordError
from windjoin.operators.spec import JoinSpec


@dataclass(frozen=True)
class Fed:
    """What one chunk gave: the join's result and the tags of the events it refused as late."""

    result: ChunkResult
    late: list[Any]

    def records(self) -> list[dict[str, Any]]:
        """One record per result (`results.pair_records`, `results.lone_records`), across tasks in emission order:
        by last arrival, then task, then the task's own order (a pair's earlier arrival next); a semi task's row
        takes its first pair's place; the rows of tuples that can pair no more come after the chunk's pairs, by
        task, then arrival."""
        records, later, closing, task_no, rank = [], [], [], [], []
        number = {name: i for i, name in enumerate(t.task for t in self.result.pairs)}
        for i, pairs in enumerate(self.result.pairs):
            records.extend(pair_records(pairs))
            later.append(pairs.later_seq)
            closing.append(np.zeros(len(pairs), np.int64))
            rank.append(np.arange(len(pairs)))
            task_no.append(np.full(len(pairs), i))
        for lone in self.result.lone:
            records.extend(lone_records(lone))
            later.append(lone.after)
            closing.append(np.full(len(lone), int(lone.at_close)))
            rank.append(lone.seq)
            task_no.append(np.full(len(lone), number.setdefault(lone.task, len(number))))
        if not records:
            return []
        keys = [np.concatenate(k) for k in (rank, task_no, closing, later)]
        return [records[i] for i in np.lexsort(keys)]


class EventFeed:
    """Events into `join` (by default the spec's `join_operator`), a chunk each `chunk_size` events."""

    def __init__(self, spec: JoinSpec, chunk_size: int, join: WindowJoin | None = None) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1 (got {chunk_size})")
        self.join = join_operator(spec) if join is None else join
        self.builder = ChunkBuilder(spec)
        self.chunk_size = chunk_size
        self._tags: dict[str, list[Any]] = {s: [] for s in spec.streams}

    def add(self, event: Mapping[str, Any], tag: Hashable, arrival_ns: int = 0) -> Fed | None:
        """Add one event (its stream under "stream"); the chunk's outcome when it completes one. Raises
        `schema.RecordError` for an event the spec refuses (nothing is added then)."""
        stream = event.get("stream")
        self.builder.add(stream, event, arrival_ns)
        self._tags[stream].append(tag)
        return self.flush() if len(self.builder) >= self.chunk_size else None

    def flush(self) -> Fed | None:
        """The chunk of the events added since the last one, if any."""
        if not len(self.builder):
            return None
        tags, self._tags = self._tags, {s: [] for s in self._tags}
        return self.process(self.builder.take(), tags)

    def finish(self) -> Fed:
        """The input is complete (flush first): the rows of the tuples not yet closed (`WindowJoin.finish`)."""
        return Fed(self.join.finish_chunk(), [])

    def process(self, chunk: Mapping[str, Arrivals], tags: Mapping[str, list[Any]]) -> Fed:
        """A chunk built elsewhere (columns decoded at once, say), `tags[stream]` giving each row's tag."""
        result = self.join.process(chunk)
        return Fed(result, [tags[s][row] for s, rows in result.late.items() for row in rows])


@dataclass(frozen=True)
class Joined:
    """What an in-process join gave: one record per result (`{"task": name, <stream>: {field: value}, ...}`, the
    side an outer, semi or anti task's row lacks None) in emission order, and the positions of the events refused
    as late (over `allowed_lateness_ms` behind)."""

    results: list[dict[str, Any]]
    late: list[int]

    def rows(self, spec: JoinSpec) -> list[tuple]:
        """The results as the oracle gives them: (task, each joined stream's tuple in the task's `join` order,
        None for the side a row alone lacks)."""
        return [(r["task"], *(r[s] for s in spec.task(r["task"]).join)) for r in self.results]


def join_events(
    spec: JoinSpec, events: Iterable[Mapping[str, Any]], chunk_size: int = 4096, join: WindowJoin | None = None
) -> Joined:
    """Join `events` (dicts naming their "stream", in arrival order) in this process, a complete input, as `windjoin
    join-file` does: no Spark and no services. An event the spec refuses (unknown stream, missing or mistyped
    field) raises `ValueError` naming its position and the reason; nothing is skipped silently. `join`: the
    operator to feed (by default the spec's `join_operator`)."""
    feed = EventFeed(spec, chunk_size, join)
    results: list[dict[str, Any]] = []
    late: list[int] = []
    for position, event in enumerate(chain(events, [None])):  # None: the end, which flushes the last chunk
        try:
            fed = feed.flush() if event is None else feed.add(event, position)
        except RecordError as err:
            raise ValueError(f"event {position}: refused ({err.reason}): {err}") from None
        if fed is not None:
            results.extend(fed.records())
            late.extend(fed.late)
    results.extend(feed.finish().records())  # a complete input: every tuple that never paired is out
    return Joined(results, sorted(late))
