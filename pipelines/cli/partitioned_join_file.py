"""join-file on several processes: workers decode blocks and join hash partitions, the main process keeps order.

A round is one block of lines per worker. Workers decode the rounds ahead while the main process judges the
round in hand (partition_router), sends each worker its partition's accepted events, and writes the previous
round's results merged into the single join's order (result_merge). At most `AHEAD` rounds are read beyond the
one being judged, so memory stays bounded whatever the file's size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any

from windjoin.connectors.formats.jsonl_blocks import LineBlock, read_blocks
from windjoin.operators.metrics import TaskCounters
from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.cli import join_worker
from windjoin.pipelines.cli.join_worker import DECODE, FINISH, JOIN, serve
from windjoin.pipelines.cli.partition_router import Refuse, Router
from windjoin.pipelines.cli.result_merge import merged_lines
from windjoin.pipelines.cli.worker_pool import WorkerPool

AHEAD = 2  # rounds being decoded beyond the one being judged


@dataclass
class PartitionedRun:
    events: int = 0
    results: int = 0
    counters: dict[str, TaskCounters] | None = None


class _Answers:
    """The pool's answers, kept until asked for by (kind, tag, worker)."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.kept: dict[tuple[str, int, int], Any] = {}

    def take(self, kind: str, tag: int, worker: int) -> Any:
        while (kind, tag, worker) not in self.kept:
            got_kind, got_tag, got_worker, answer = self.pool.receive()
            self.kept[got_kind, got_tag, got_worker] = answer
        return self.kept.pop((kind, tag, worker))


def join_partitioned(
    spec: JoinSpec,
    fields: Mapping[str, str],
    events: Path,
    out: IO[bytes],
    refuse: Refuse,
    chunk_size: int,
    workers: int,
    progress: Callable[[], Any] = nullcontext,
) -> PartitionedRun:
    """Join `events` on `workers` processes, partitioned by `fields` (operators.co_partition), into `out`;
    `progress` opens a progress bar (a tqdm, say: started after the workers, it adds no thread to fork)."""
    run = PartitionedRun()
    router = Router(spec, fields, workers)
    with WorkerPool(serve, (spec,), workers, join_worker.__name__) as pool, progress() as bar:
        rounds = _rounds(read_blocks(events, chunk_size, bar), workers)
        answers = _Answers(pool)
        decoding: deque[tuple[int, list[LineBlock]]] = deque()

        def decode_next() -> None:
            for tag, blocks in islice(rounds, 1):
                for worker, block in enumerate(blocks):
                    pool.send(worker, (DECODE, tag, block))
                decoding.append((tag, blocks))

        def write(tag: int, sent: list[int]) -> None:
            parts = [answers.take(JOIN, tag, worker) for worker in sent]
            out.write(merged_lines(parts))
            run.results += sum(len(p) for p in parts)

        for _ in range(AHEAD):
            decode_next()
        joining: tuple[int, list[int]] | None = None
        while decoding:
            tag, blocks = decoding.popleft()
            decoded = [answers.take(DECODE, tag, worker) for worker in range(len(blocks))]
            decode_next()
            works = router.route_round(list(zip(blocks, decoded, strict=True)), refuse)
            run.events += sum(len(b) for b in blocks)
            sent = [worker for worker, work in enumerate(works) if work is not None]
            for worker in sent:
                pool.send(worker, (JOIN, tag, works[worker]))
            if joining is not None:
                write(*joining)
            joining = (tag, sent)
        if joining is not None:
            write(*joining)
        for worker in range(workers):
            pool.send(worker, (FINISH, 0, None))
        run.counters = _merged([answers.take(FINISH, 0, worker) for worker in range(workers)])
    return run


def _rounds(blocks: Iterator[LineBlock], size: int) -> Iterator[tuple[int, list[LineBlock]]]:
    tag = 0
    while True:
        round_ = list(islice(blocks, size))
        if not round_:
            return
        yield tag, round_
        tag += 1


def _merged(counters: list[Mapping[str, TaskCounters]]) -> dict[str, TaskCounters]:
    total = {name: TaskCounters() for name in counters[0]}
    for each in counters:
        for name, c in each.items():
            total[name].add(c)
    return total
