"""The main process's share of a partitioned join-file: judge lateness over the whole file, route the rest.

Lateness is judged as one join judges it (operators.lateness: against the running maximum event time, in
arrival order, over every event of the file), block by block, refusing the same lines in the same order as
join-file's single join does. The accepted events of a round of blocks then go to the partition of their
stream's field (operators.co_partition), with the watermark before the round: no accepted event is below it, so
a partition's join refuses none of them, and expires nothing a later event could still join.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from windjoin.connectors.formats.jsonl_blocks import LineBlock
from windjoin.operators.batch import Arrivals
from windjoin.operators.lateness import in_arrival_order, running_max_late
from windjoin.operators.partitioning import partition_of
from windjoin.operators.schema import LATE
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.cli.block_decode import DecodedBlock
from windjoin.pipelines.cli.join_worker import JoinWork

LATE_DETAIL = "event time is over allowed_lateness_ms behind the latest event time"
Refuse = Callable[[int, bytes, str, str], None]  # (file line, raw line, reason, detail)


class Router:
    """Judges blocks in file order and splits their accepted events into `partitions` by `fields`."""

    def __init__(self, spec: JoinSpec, fields: Mapping[str, str], partitions: int) -> None:
        self.spec = spec
        self.fields = dict(fields)
        self.partitions = partitions
        self.ts_fields = {name: stream.timestamp for name, stream in spec.streams.items()}
        self.max_ts: int | None = None

    def route_round(self, round_: Sequence[tuple[LineBlock, DecodedBlock]], refuse: Refuse) -> list[JoinWork | None]:
        """Refuse the round's bad and late lines (by block: bad ones in line order, then late ones by stream and
        row, as join-file's single join); each partition's accepted events (None: it has none)."""
        watermark = None if self.max_ts is None else self.max_ts - self.spec.allowed_lateness_ms
        kept: dict[str, list[tuple[Arrivals, np.ndarray]]] = {s: [] for s in self.fields}
        for block, decoded in round_:
            for i, reason, detail in decoded.refused:
                refuse(int(block.line_no[i]), block.line(i), reason, detail)
            late = self._late(decoded.chunk)
            for stream, rows in late.items():
                for i in decoded.lines[stream][rows].tolist():
                    refuse(int(block.line_no[i]), block.line(i), LATE, LATE_DETAIL)
            for stream in self.fields:
                accepted = np.ones(len(decoded.chunk[stream]), dtype=bool)
                accepted[late[stream]] = False
                lines = block.line_no[decoded.lines[stream]][accepted]
                kept[stream].append((_take(decoded.chunk[stream], accepted), lines))
        return self._split({s: _concat(parts) for s, parts in kept.items()}, watermark)

    def _late(self, chunk: Mapping[str, Arrivals]) -> dict[str, np.ndarray]:
        """Per stream, the rows of the block late against the running maximum event time (which they advance)."""
        ts, owner, row = in_arrival_order(chunk, self.ts_fields)
        is_late, self.max_ts = running_max_late(ts, self.max_ts, self.spec.allowed_lateness_ms)
        return {s: np.sort(row[(owner == i) & is_late]) for i, s in enumerate(chunk)}

    def _split(self, events: dict[str, tuple[Arrivals, np.ndarray]], watermark: int | None) -> list[JoinWork | None]:
        part = {s: partition_of(a.columns[self.fields[s]], self.partitions) for s, (a, _) in events.items()}
        works: list[JoinWork | None] = []
        for p in range(self.partitions):
            picked = {s: part[s] == p for s in events}
            lines = {s: events[s][1][picked[s]] for s in events}
            total = sum(len(x) for x in lines.values())
            if total == 0:
                works.append(None)
                continue
            rank = np.empty(total, dtype=np.int64)  # arrival order inside the partition: by file line
            rank[np.argsort(np.concatenate(list(lines.values())), kind="stable")] = np.arange(total)
            bounds = np.cumsum([0, *(len(x) for x in lines.values())])
            chunk = {s: _take(events[s][0], picked[s], rank[bounds[i] : bounds[i + 1]]) for i, s in enumerate(events)}
            works.append(JoinWork(chunk, lines, watermark))
        return works


def _take(arrivals: Arrivals, rows: np.ndarray, order: np.ndarray | None = None) -> Arrivals:
    columns = {name: column[rows] for name, column in arrivals.columns.items()}
    arrival_ns = arrivals.arrival_ns[rows] if arrivals.arrival_ns is not None else None
    return Arrivals(columns, arrivals.order[rows] if order is None else order, arrival_ns)


def _concat(parts: list[tuple[Arrivals, np.ndarray]]) -> tuple[Arrivals, np.ndarray]:
    """One stream's accepted events of several blocks, with their file lines (`order` is left meaningless)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0][0]
    columns = {name: np.concatenate([a.columns[name] for a, _ in parts]) for name in first.columns}
    arrival_ns = np.concatenate([a.arrival_ns for a, _ in parts])
    lines = np.concatenate([lines for _, lines in parts])
    return Arrivals(columns, np.zeros(len(lines), dtype=np.int64), arrival_ns), lines
