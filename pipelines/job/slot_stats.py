"""A slot's summary of one batch (its one output row, as JSON): what the driver, the metrics and the controller read.

Results leave elsewhere (`slot_output`); this is the slot's report: rows read and joined, moves, the event-time
clock, the state's size and span, the time budget's phases, per-partition load (`slot_load.GROUP_FIELDS`) and
disk pushes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import numpy as np

from windjoin.operators.partitioning import Group
from windjoin.pipelines.job.slot_batch import SlotBatch
from windjoin.pipelines.job.slot_meta import SlotMeta
from windjoin.pipelines.job.slot_spill import SpillReport


class SlotReport(TypedDict):
    """A slot's report of one batch, every key the driver, the metrics and the controller read (`slot_stats`
    fills the slot's part, `slot_output.write_slot` the output's, the driver adds `slot`)."""

    slot_index: int  # the slot's index (its grouping-key value is `slot`)
    routing_version: int
    shed_ratio: float
    shed: dict[str, int]  # records shed per stream
    moved_in: list[int]  # partitions whose state (or part of it) moved
    moved_out: list[int]
    moved_in_groups: list[list[int]]  # exactly which units or pieces, as [partition, depth, pattern]
    moved_out_groups: list[list[int]]
    rows: int  # rows read
    joined: int  # live rows joined
    dead: int
    punctuations: int
    segments: int
    clock_seq: int | None  # event time: the batch's plan
    batch_limit: int | None  # the record limit the batch was planned with
    batch_waiting: int | None  # records left in the topics when it was planned
    watermark: int | None
    marks: dict[str, list[int]]  # per input partition, the oldest and newest event time read here
    state_span_ms: int
    held_span_ms: int
    window_tuples: int
    state_bytes: int
    outputs: int
    seconds: float
    phases: dict[str, float]  # milliseconds per phase of the slot's work
    read_tasks: list[dict[str, Any]]  # the read tasks' timings (reported by the first slot)
    cpu_seconds: float
    groups: dict[str, list[Any]]  # per hash partition, columns slot_load.GROUP_FIELDS
    spill: dict[str, Any]  # disk pushes (paper 004): SpillReport.with_totals and the last request taken
    # the slot's output (slot_output.write_slot)
    emitted_at: NotRequired[int]
    pairs: NotRequired[dict[str, list[int]]]  # per task: pairs staged, largest result time
    delays: NotRequired[list[list[int]]]  # production delays as [values, counts]
    dead_by_reason: NotRequired[dict[str, int]]
    dead_letters: NotRequired[int]
    order_seconds: NotRequired[float]
    stage_seconds: NotRequired[float]
    slot: NotRequired[int]  # added by the driver: the slot's grouping-key value


@dataclass
class BatchWork:
    """What the slot did with a batch, besides what its meta and rows tell."""

    moved_in: list[Group]
    moved_out: list[Group]
    dead: int  # dead letters written, the refused and the late
    horizon: int | None  # the watermark state expired by
    groups: dict[str, list[Any]]  # per hash partition, columns slot_load.GROUP_FIELDS
    phases: dict[str, float]  # milliseconds per phase of the slot's work
    seconds: float
    cpu_seconds: float  # this worker's CPU time for the slot: undiluted by other processes on the machine
    spill: SpillReport


def slot_stats(index: int, batch: SlotBatch, meta: SlotMeta, work: BatchWork, history_ms: int | None) -> SlotReport:
    """The batch's summary at slot `index` (see the module docstring)."""
    epoch, clock, groups = batch.epoch, batch.clock, work.groups
    spans = _state_spans(meta, work.horizon, history_ms)
    return {
        "slot_index": index,
        "routing_version": epoch.routing.version if epoch is not None else 0,
        "shed_ratio": epoch.shed_ratio if epoch is not None else 0.0,
        "shed": batch.shed,
        # partitions whose state (or part of it) moved, and exactly which units/pieces as [p, depth, pattern]
        "moved_in": sorted({g.partition for g in work.moved_in}),
        "moved_out": sorted({g.partition for g in work.moved_out}),
        "moved_in_groups": [[g.partition, g.depth, g.pattern] for g in work.moved_in],
        "moved_out_groups": [[g.partition, g.depth, g.pattern] for g in work.moved_out],
        "rows": batch.rows,
        "joined": len(batch.live),
        "dead": work.dead,
        "punctuations": batch.punctuations,
        "segments": len(meta.segments),
        # event time: the batch's clock and watermark, the newest event time read per input partition (the
        # driver reports their maxima over slots to the next batch's plan), the event-time span of the state
        "clock_seq": clock.get("seq"),
        "batch_limit": clock.get("limit"),  # the record limit the batch was planned with
        "batch_waiting": clock.get("waiting"),  # records left in the topics when it was planned
        "watermark": meta.watermark,
        "marks": batch.marks,
        "state_span_ms": spans[0],
        "held_span_ms": spans[1],
        "window_tuples": sum(groups["window_tuples"]),
        "state_bytes": sum(groups["state_bytes"]),
        "outputs": sum(groups["outputs"]),
        "seconds": work.seconds,
        # the time budget's shares measured here: this slot's phases, and the batch's read tasks (reported to
        # the first slot by their timing rows; their slowest task, as the stage waits for it)
        "phases": work.phases,
        "read_tasks": batch.read_tasks,
        "cpu_seconds": work.cpu_seconds,
        "groups": groups,
        # disk pushes (paper 004): this batch's pushes and clean-ups, and the generations now on disk
        "spill": {
            **work.spill.with_totals(meta),
            "spill_version": epoch.spill_version if epoch is not None else 0,  # the last request taken
        },
    }


def _state_spans(meta: SlotMeta, watermark: int | None, history_ms: int | None) -> tuple[int, int]:
    """The widest event-time span of a partition's state in this slot: of its live tuples (from the oldest one a
    future tuple can still join, the expiry `watermark` less the state's history, to the newest), and of all it
    holds (segments expire whole, so one that still holds a live tuple keeps its expired ones too)."""
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for segment in meta.segments:
        for part, ts in segment.max_ts.items():
            high[part] = max(high.get(part, ts), ts)
            first = segment.min_ts.get(part, ts)
            low[part] = min(low.get(part, first), first)
    horizon = -np.inf if watermark is None or history_ms is None else watermark - history_ms
    live = max((high[p] - max(low[p], horizon) for p in high), default=0)
    return int(max(live, 0)), max((high[p] - low[p] for p in high), default=0)
