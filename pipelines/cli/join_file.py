"""`windjoin join-file`: run a spec's join tasks over a JSON Lines file of events in arrival order."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_columns import decode_stream_columns
from windjoin.connectors.formats.jsonl_file import CODEC, decode_line, read_lines, write_record
from windjoin.operators.batch import Arrivals
from windjoin.operators.co_partition import co_partition
from windjoin.operators.schema import LATE, RecordError
from windjoin.operators.spec import JoinSpec
from windjoin.operators.testing.feed import EventFeed, Fed
from windjoin.pipelines.cli.partition_router import LATE_DETAIL
from windjoin.pipelines.cli.partitioned_join_file import join_partitioned

DEFAULT_CHUNK = 16384  # lines a step; a step's probe of each stored block costs the same for 4,096 (3-4x per line)
CODEC_LIMIT = CODEC.max_message_bytes


@dataclass
class Refusal:
    """An event line that did not join, and why."""

    line: int
    reason: str
    detail: str
    raw: str


@dataclass
class JoinFileReport:
    events: int = 0
    results: int = 0
    refused: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    tasks: dict[str, dict[str, object]] = field(default_factory=dict)


class _Run:
    """One pass over an events file: chunks in (operators.testing.EventFeed), results and refusals out."""

    def __init__(self, spec: JoinSpec, out: IO[bytes], on_refusal: Any, chunk_size: int) -> None:
        self.feed = EventFeed(spec, chunk_size)
        self.schemas = self.feed.builder.schemas
        self.out = out
        self.on_refusal = on_refusal
        self.report = JoinFileReport()

    def add(self, line_no: int, raw: bytes, decoded: dict[str, Any] | DecodeError) -> None:
        self.report.events += 1
        try:
            if isinstance(decoded, DecodeError):
                raise RecordError(decoded.reason, decoded.detail)
            fed = self.feed.add(decoded, (line_no, raw), time.time_ns())
        except RecordError as err:
            self.refuse(line_no, raw, err.reason, str(err))
            return
        self._take(fed)

    def refuse(self, line_no: int, raw: bytes, reason: str, detail: str) -> None:
        self.report.refused[reason] += 1
        self.on_refusal(Refusal(line_no, reason, detail, raw.decode("utf-8", errors="replace")))

    def add_block(self, block: list[tuple[int, bytes]]) -> None:
        """Lines decoded at once when every one is plain (connectors.formats.json_columns), else line by line; either
        way the block ends its chunk."""
        decoded = decode_stream_columns(pa.array([raw for _, raw in block], pa.binary()), self.schemas, CODEC_LIMIT)
        if decoded is None:
            for line_no, raw in block:
                self.add(line_no, raw, decode_line(raw))
            self._take(self.feed.flush())
            return
        self.report.events += len(block)
        arrival = time.time_ns()
        chunk, lines = {}, {}
        for stream, (positions, columns) in decoded.items():
            numpy_columns = {name: column.to_numpy(zero_copy_only=False) for name, column in columns.items()}
            chunk[stream] = Arrivals(numpy_columns, positions, np.full(len(positions), arrival, np.int64))
            lines[stream] = [block[i] for i in positions.tolist()]
        self._take(self.feed.process(chunk, lines))

    def finish(self) -> None:
        """The whole file is in: every tuple that never paired is out (outer and anti tasks)."""
        self._take(self.feed.finish())

    def _take(self, fed: Fed | None) -> None:
        """Refuse the chunk's late lines; write its results across tasks in emission order (`Fed.records`)."""
        if fed is None:
            return
        for line_no, raw in fed.late:
            self.refuse(line_no, raw, LATE, LATE_DETAIL)
        records = fed.records()
        for record in records:
            write_record(self.out, record)
        self.report.results += len(records)


def join_file(
    spec: JoinSpec,
    events: Path,
    out: IO[bytes],
    on_refusal: Any,
    chunk_size: int = DEFAULT_CHUNK,
    show_progress: bool | None = None,
    workers: int = 1,
    on_note: Any = None,
) -> JoinFileReport:
    """Join every event of `events`, writing results to `out` and passing each refused line to `on_refusal`.

    With `workers` > 1 hash partitions of the events are joined in that many processes, when the spec splits
    exactly (operators.co_partition); the results, their order and the refusals are the same. When it does not,
    `on_note` (default: stderr) is told why, once, and one process joins.
    """
    run = _Run(spec, out, on_refusal, chunk_size)
    split = co_partition(spec) if workers > 1 else None
    if split is not None and split.fields is None:
        (on_note or _note)(f"joining on one worker: {split.reason}")
    started = time.perf_counter()
    disable = None if show_progress is None else not show_progress  # None: a bar only on a terminal

    def bar() -> tqdm:
        size = events.stat().st_size
        return _Bar(total=size, unit="B", unit_scale=True, desc="joining", disable=disable, file=sys.stderr)

    if split is not None and split.fields is not None:
        done = join_partitioned(spec, split.fields, events, out, run.refuse, chunk_size, workers, bar)
        run.report.events, run.report.results = done.events, done.results
        counters = done.counters or {}
    else:
        with bar() as progress:
            block: list[tuple[int, bytes]] = []
            for line in read_lines(events, progress):
                block.append(line)
                if len(block) == chunk_size:
                    run.add_block(block)
                    block = []
            if block:
                run.add_block(block)
            run.finish()
        counters = run.feed.join.counters
    run.report.seconds = time.perf_counter() - started
    run.report.tasks = {name: c.summary() for name, c in counters.items()}
    return run.report


class _Bar(tqdm):
    """A bar without tqdm's monitor thread, so the worker processes can be forked from a single thread."""

    monitor_interval = 0


def default_workers() -> int:
    """The cores this process may run on (all the machine's unless its affinity says fewer)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _note(text: str) -> None:
    print(f"windjoin join-file: {text}", file=sys.stderr)
