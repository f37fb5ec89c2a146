"""One join-file worker process: it decodes the blocks it is sent and joins one hash partition of the events.

The partition's join is the spec's own operator, given only the events the main process accepted and its
watermark (`set_watermark`), so it refuses nothing; each result line is encoded here, as join-file writes it,
with the file line of its later arrival so the main process can merge the partitions into one order.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from windjoin.operators.arrivals import ChunkBuilder
from windjoin.operators.batch import Arrivals
from windjoin.operators.join import WindowJoin
from windjoin.operators.mjoin import join_operator
from windjoin.operators.spec import JoinSpec
from windjoin.operators.testing.feed import Fed
from windjoin.pipelines.cli.block_decode import decode_block
from windjoin.pipelines.cli.result_merge import JoinedLines
from windjoin.pipelines.cli.worker_pool import ERROR

DECODE, JOIN, FINISH = "decode", "join", "finish"
PARENT_POLL_S = 1.0


@dataclass(frozen=True)
class JoinWork:
    """A partition's accepted events of some blocks: arrivals per stream, each row's file line, the watermark."""

    chunk: dict[str, Arrivals]
    lines: dict[str, np.ndarray]
    watermark: int | None


class PartitionJoin:
    """The spec's join over one partition's events, fed `JoinWork` in file order."""

    def __init__(self, spec: JoinSpec) -> None:
        self.join: WindowJoin = join_operator(spec)
        self.fed = 0  # rows fed so far: the join numbers the next one's arrival from here

    def process(self, work: JoinWork) -> JoinedLines:
        self.join.set_watermark(work.watermark)
        result = self.join.process(work.chunk)
        if any(len(rows) for rows in result.late.values()):
            raise AssertionError("a partition refused events as late that the main process accepted")
        total = sum(len(a) for a in work.chunk.values())
        line_of_arrival = np.empty(total, dtype=np.int64)
        for stream, arrivals in work.chunk.items():
            line_of_arrival[arrivals.order] = work.lines[stream]
        later = np.sort(np.concatenate([np.zeros(0, np.int64), *(p.later_seq for p in result.pairs)]))
        later_lines = line_of_arrival[later - self.fed]
        self.fed += total
        encoded = [orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in Fed(result, []).records()]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        return JoinedLines(later_lines, lengths, b"".join(encoded))

    def counters(self) -> Mapping[str, Any]:
        return self.join.counters


def serve(worker: int, inbox: Any, outbox: Any, spec: JoinSpec) -> None:
    """Answer the main process's messages (kind, tag, payload) with (kind, tag, worker, answer) until None.

    Ctrl-C is the main process's to handle (it stops the workers); a failure is reported, then the worker ends.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    partition = PartitionJoin(spec)
    builder = ChunkBuilder(spec)
    parent = mp.parent_process()
    while True:
        try:
            message = inbox.get(timeout=PARENT_POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if message is None:
            return
        kind, tag, payload = message
        try:
            if kind == DECODE:
                answer: Any = decode_block(spec, builder, payload)
            elif kind == JOIN:
                answer = partition.process(payload)
            else:
                answer = partition.counters()
        except BaseException:
            outbox.put((ERROR, tag, worker, traceback.format_exc()))
            return  # the outbox sends the traceback before the process ends
        outbox.put((kind, tag, worker, answer))
