"""The join job's per-batch load reports as the controller folds them: one entry per batch (`LoadEntry`), its
slots' reports as plain data (the layout: `connectors.redis.load_reports`), and the controller's views of a run
of entries. A batch replayed after a failure is reported twice; every view keeps the latest report of each
(batch, slot)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from windjoin.operators.control.load import Load, SlotBatch
from windjoin.operators.partitioning import Group


@dataclass(frozen=True)
class LoadEntry:
    """One batch's load report as read back from the stream."""

    entry_id: str
    batch_id: int
    finished_at: float
    interval_s: float
    slots: list[dict[str, Any]]


def slot_batches(entries: Iterable[LoadEntry]) -> list[SlotBatch]:
    """The controller's view of load entries: one SlotBatch per (batch, slot), the latest report winning (a
    replayed batch is reported twice), groups as whole partitions."""
    latest: dict[tuple[int, int], SlotBatch] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            seconds = groups.get("seconds", [])
            columns = zip(
                groups.get("part", []),
                groups.get("tuples_in", []),
                seconds,
                groups.get("state_bytes", []),
                groups.get("outputs", []),
                groups.get("cpu", seconds),  # reports from before the cpu column: wall seconds stand in
                strict=True,
            )
            batch = SlotBatch(
                entry.batch_id,
                int(report["slot"]),
                entry.interval_s,
                Load(
                    tuples_in=int(report.get("joined", 0)),
                    processing_s=float(report.get("seconds", 0.0)),
                    backlog=int(report.get("backlog", 0)),
                    state_bytes=int(report.get("state_bytes", 0)),
                    outputs=int(report.get("outputs", 0)),
                    cpu_s=float(report.get("cpu_seconds", 0.0)),
                ),
                {Group(int(p)): Load(int(n), float(s), 0, int(b), int(o), float(c)) for p, n, s, b, o, c in columns},
            )
            latest[(entry.batch_id, batch.slot)] = batch
    return [latest[k] for k in sorted(latest)]


def shed_records(entries: Iterable[LoadEntry]) -> int:
    """Records the adapter shed in these batches, over all slots and streams (a replayed batch's latest report
    counts once, as in `slot_batches`)."""
    latest: dict[tuple[int, int], int] = {}
    for entry in entries:
        for report in entry.slots:
            latest[(entry.batch_id, int(report["slot"]))] = sum(int(n) for n in (report.get("shed") or {}).values())
    return sum(latest.values())


def fine_histograms(entries: Iterable[LoadEntry]) -> dict[int, np.ndarray]:
    """Each partition's window tuples by mini bits (the reports' `fine` column), as of the latest batch that
    reported it, summed over the slots holding a share of it (its mini-groups may sit on several slots; a
    replayed batch's latest report per slot wins). Reports without the column give nothing."""
    latest: dict[tuple[int, int], dict[int, list[int]]] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            if "fine" in groups:
                fine = {int(p): f for p, f in zip(groups["part"], groups["fine"], strict=True)}
                latest[(entry.batch_id, int(report["slot"]))] = fine
    newest: dict[int, int] = {}
    for (batch, _), parts in latest.items():
        for p in parts:
            newest[p] = max(newest.get(p, batch), batch)
    out: dict[int, np.ndarray] = {}
    for (batch, _), parts in latest.items():
        for p, counts in parts.items():
            if newest[p] == batch:
                hist = np.asarray(counts, dtype=np.float64)
                out[p] = out[p] + hist if p in out else hist
    return out


def fine_work(entries: Iterable[LoadEntry]) -> dict[int, np.ndarray]:
    """Each partition's join work by mini bits over the entries' batches: per bin, rows in (`fine_in`) times the
    window tuples they met (`fine`), the probes' candidates as if each bin held one key, summed over batches and
    the slots holding a share (a replayed batch's latest report per slot wins). Partitions without rows in, or
    reports without the column, give nothing."""
    latest: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for entry in entries:
        for report in entry.slots:
            groups = report.get("groups") or {}
            if "fine_in" in groups:
                columns = zip(groups["part"], groups["fine"], groups["fine_in"], strict=True)
                work = {int(p): np.asarray(f, np.float64) * np.asarray(n, np.float64) for p, f, n in columns}
                latest[(entry.batch_id, int(report["slot"]))] = work
    out: dict[int, np.ndarray] = {}
    for parts in latest.values():
        for p, work in parts.items():
            out[p] = out[p] + work if p in out else work
    return {p: work for p, work in out.items() if work.sum() > 0}
