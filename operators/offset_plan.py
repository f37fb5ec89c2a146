"""Kafka offsets as Spark stores them and the plan of a batch: how many records each partition gives (max-min
fair under a limit, capped per partition for event-time alignment) and the ranges read tasks get. Pure: the
reader (`connectors.kafka.source`) asks the broker for the bounds and reads the ranges."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def make_offset(
    positions: Mapping[str, int],
    control: dict[str, Any] | None = None,
    event_time: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The offset dict Spark stores: positions in a canonical (sorted) key order (and, for a reader that plans
    with them, its control state and event time, operators.event_time)."""
    offset: dict[str, Any] = {"partitions": {k: int(positions[k]) for k in sorted(positions)}}
    if control is not None:
        offset["control"] = control
    if event_time is not None:
        offset["event_time"] = event_time
    return offset


def parse_offset(offset: Mapping[str, Any]) -> dict[str, int]:
    """The positions of an offset dict as made by `make_offset` (or read back from a checkpoint; one written
    before this version may carry an "epoch", which nothing reads)."""
    try:
        return {str(k): int(v) for k, v in offset["partitions"].items()}
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise ValueError(
            f"not a windjoin Kafka offset (want {{'partitions': {{'topic:partition': n}}}}): {offset!r}"
        ) from exc


def fair_split(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """Share `limit` records among partitions max-min fairly: how many each may take from its `available`.

    Every partition gets an equal share, capped at what it has; what small partitions leave unused is shared
    again among the others. Records left by integer division go to the partitions with the largest remaining
    backlog (ties: key order), so a limit smaller than the partition count starves no partition for long.
    The result is deterministic and sums to ``min(limit, sum(available))``.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    wanting = {k: int(n) for k, n in available.items() if n > 0}
    grant = dict.fromkeys(available, 0)
    budget = limit
    while wanting and budget > 0:
        share = budget // len(wanting)
        if share == 0:
            break
        satisfied = {k: n for k, n in wanting.items() if n <= share}
        if satisfied:  # give the small ones all they want, re-share the rest
            for k, n in satisfied.items():
                grant[k] += n
                budget -= n
                del wanting[k]
            continue
        for k in wanting:
            grant[k] += share
            wanting[k] -= share
            budget -= share
    if wanting and budget > 0:  # fewer records left than partitions wanting: largest backlog first
        for k in sorted(wanting, key=lambda k: (-wanting[k], k))[:budget]:
            grant[k] += 1
    return grant


def plan_end(
    start: Mapping[str, int],
    bounds: Mapping[str, tuple[int, int]],
    limit: int | None,
    caps: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """End positions for the next batch, given each partition's (low, high) watermarks in `bounds`.

    A known partition advances towards its high watermark (never backwards), by at most its entry in `caps`
    (event-time alignment), all of them together by at most `limit` records (`fair_split`). A partition that
    is not in `start` (created since) enters at its low watermark without being read, so its start is recorded
    in an offset before any of it is read and a replay of the next batch reads the same records.
    """
    ends = dict(start)
    available: dict[str, int] = {}
    for key, (low, high) in bounds.items():
        if key in start:
            available[key] = max(0, int(high) - int(start[key]))
            if caps is not None and key in caps:
                available[key] = min(available[key], max(0, int(caps[key])))
        else:
            ends[key] = int(low)
    grant = available if limit is None else fair_split(available, limit)
    for key, n in grant.items():
        ends[key] = int(start[key]) + n
    return ends


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's records ``[start, end)`` for one batch."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


def plan_ranges(start: Mapping[str, int], end: Mapping[str, int]) -> list[KafkaRange]:
    """The non-empty ranges between two position maps, sorted by (topic, partition)."""
    ranges = []
    for key, hi in end.items():
        lo = start.get(key, hi)  # a partition new in `end` starts there (see `plan_end`)
        if hi < lo:
            raise ValueError(f"end offset {hi} is before start offset {lo} for {key}")
        if hi > lo:
            topic, partition = split_key(key)
            ranges.append(KafkaRange(topic, partition, int(lo), int(hi)))
    ranges.sort(key=lambda r: (r.topic, r.partition))
    return ranges


def group_ranges(ranges: Sequence[KafkaRange], tasks: int | None) -> list[tuple[KafkaRange, ...]]:
    """The ranges dealt to at most `tasks` read tasks, the largest first to the task with the fewest records
    (so the tasks end together), each task's ranges in (topic, partition) order; None: a task per range.

    Every task costs Spark a scheduling round and a Python worker hand-off (~0.1-0.3 s here), whatever it
    reads: a batch of a few thousand records over 8 partitions took 5 waves of tasks on 2 cores, one task per
    core reads it in one."""
    if tasks is None or tasks >= len(ranges):
        return [(r,) for r in ranges]
    loads = [0] * tasks
    groups: list[list[KafkaRange]] = [[] for _ in range(tasks)]
    for rng in sorted(ranges, key=lambda r: (-r.count, r.topic, r.partition)):
        lightest = loads.index(min(loads))
        groups[lightest].append(rng)
        loads[lightest] += rng.count
    return [tuple(sorted(g, key=lambda r: (r.topic, r.partition))) for g in groups if g]
