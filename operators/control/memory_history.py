"""The controller's view of memory, built from the join job's load reports (paper 004's measures per group).

A slot's report carries each partition's window bytes, outputs and tuples in for the batch, and the slot's disk
pushes (`spill`: generations per partition, the window bytes a clean-up reads back, the last spill request
taken). Paper 004's P_o (results over a group's life) and inserted bytes are sums over every batch, so they are
accumulated here across epochs; a restarted controller starts them afresh (they order which group goes first,
never what is correct).
T_u is the wall time (ms) of the newest batch in which the group took a tuple: inactivity is measured on the
reports' own clock, not in event time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from windjoin.operators.control.load_entries import LoadEntry
from windjoin.operators.control.memory import MemoryView
from windjoin.operators.spill.planner import SlotMeasure
from windjoin.operators.spill.stats import GroupStats


class MemoryHistory:
    """Folds load reports into per-group totals and each slot's latest report; `view` reads the result."""

    def __init__(self) -> None:
        self.outputs: dict[int, int] = {}  # P_o per partition, all batches
        self.inserted: dict[int, float] = {}  # bytes of the tuples each partition took, all batches
        self.last_insert: dict[int, int] = {}  # T_u: wall ms of the last batch that gave the partition a tuple
        self.latest: dict[int, tuple[int, float, dict[str, Any]]] = {}  # slot -> (batch, finished_at, report)

    def add(self, entries: Iterable[LoadEntry]) -> None:
        """Count each (batch, slot) once: a batch replayed after a failure is reported again with the same ids."""
        for entry in entries:
            for report in entry.slots:
                slot = int(report["slot"])
                if slot in self.latest and entry.batch_id <= self.latest[slot][0]:
                    continue
                self.latest[slot] = (entry.batch_id, entry.finished_at, report)
                self._count(report, int(entry.finished_at * 1000))

    def _count(self, report: dict[str, Any], at_ms: int) -> None:
        groups = report.get("groups") or {}
        window = int(report.get("window_tuples", 0))
        slot_bytes_per_tuple = int(report.get("state_bytes", 0)) / window if window else 0.0
        columns = zip(
            groups.get("part", []),
            groups.get("tuples_in", []),
            groups.get("outputs", []),
            groups.get("window_tuples", []),
            groups.get("state_bytes", []),
            strict=True,
        )
        for part, tuples_in, outputs, held, held_bytes in columns:
            p = int(part)
            per_tuple = held_bytes / held if held else slot_bytes_per_tuple
            self.outputs[p] = self.outputs.get(p, 0) + int(outputs)
            self.inserted[p] = self.inserted.get(p, 0.0) + int(tuples_in) * per_tuple
            if tuples_in:
                self.last_insert[p] = at_ms

    def view(self, slots: int) -> MemoryView:
        """Each of slots 0..slots-1 as its latest report shows it (a slot that never reported holds nothing)."""
        measures, taken, now = [], 0, 0
        for slot in range(slots):
            if slot not in self.latest:
                measures.append(SlotMeasure(slot, 0, 0, {}))
                continue
            _, finished_at, report = self.latest[slot]
            spill = report.get("spill") or {}
            taken = max(taken, int(spill.get("spill_version", 0)))
            now = max(now, int(finished_at * 1000))
            measures.append(self._measure(slot, report, spill))
        return MemoryView(tuple(measures), taken, now)

    def _measure(self, slot: int, report: dict[str, Any], spill: dict[str, Any]) -> SlotMeasure:
        groups = report.get("groups") or {}
        held = dict(zip((int(p) for p in groups.get("part", [])), groups.get("state_bytes", []), strict=True))
        generations = {int(p): int(n) for p, n in (spill.get("generations") or {}).items()}
        reload_bytes = {int(p): int(n) for p, n in (spill.get("reload_bytes") or {}).items()}
        stats = {
            p: GroupStats(
                size_bytes=int(held.get(p, 0)),
                outputs=self.outputs.get(p, 0),
                last_insert_ts=self.last_insert.get(p),
                disk_generations=generations.get(p, 0),
                inserted_bytes=int(self.inserted.get(p, 0.0)),
                pushed_bytes=reload_bytes.get(p, 0),
            )
            for p in sorted(set(held) | set(generations))
        }
        return SlotMeasure(slot, int(report.get("state_bytes", 0)), int(report.get("outputs", 0)), stats)
