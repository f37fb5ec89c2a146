"""Slots of partition groups under one memory-adaptation planner, adapted synchronously between chunks.

The operator-level model of the job's memory adaptation: each slot is a GroupedJoin holding the groups the
routing gives it; every `adapt_every` chunks the planner sees each slot's memory, outputs since the last round and
group statistics, and its pushes and relocations are applied at once. Applying at a chunk boundary is what the
job's control epochs give (operators/control/job_epoch.py hands a group's state between slots at a batch boundary),
so no tuple is in flight when a group moves. Arrivals are numbered once here, so a group keeps one numbering
whichever slot holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tests.models.spill_group_join import ID, GenerationFiles, GroupedJoin, GroupedResult, Results
from windjoin.operators.batch import Arrivals, check_arrival_order
from windjoin.operators.spec import JoinSpec
from windjoin.operators.spill.chunks import split_by
from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.planner import Cleanup, Decision, Move, SlotMeasure, plan


@dataclass
class AdaptationLog:
    """What the adaptations did: decisions per round and bytes pushed / moved."""

    decisions: list[tuple[int, Decision]] = field(default_factory=list)  # (chunk number, decision)
    pushed_bytes: int = 0
    forced_bytes: int = 0
    moved_bytes: int = 0
    forced_at: list[tuple[int, int]] = field(default_factory=list)  # (event time, bytes) of forced pushes
    cleaned_groups: int = 0  # groups cleaned up during the run


class AdaptiveCluster:
    """`process` chunks over the slots, `adapt` every `adapt_every` chunks, `cleanup` at the end."""

    def __init__(
        self,
        spec: JoinSpec,
        config: MemoryAdaptationConfig,
        files: Callable[[int], GenerationFiles],
        slot_of: Mapping[int, int],
        adapt_every: int = 1,
        query_bytes: int | None = None,
        relocate: bool = True,
    ) -> None:
        self.spec = spec
        self.config = config
        self.slot_of = dict(slot_of)  # partition -> slot
        n_slots = max(self.slot_of.values()) + 1
        self.slots = [GroupedJoin(spec, files(i)) for i in range(n_slots)]
        self.adapt_every = adapt_every
        self.query_bytes = query_bytes
        self.relocate = relocate
        self.log = AdaptationLog()
        self.chunks = 0
        self._outputs = [0] * n_slots  # results per slot since the last round
        self._next_id = 0
        self._cleaned: Results = []  # results of this round's clean-ups, returned with the chunk

    def process(self, chunk: Mapping[str, Arrivals]) -> GroupedResult:
        total = check_arrival_order(chunk)
        routed = self.slots[0]
        labels, numbered = {}, {}
        for s, a in chunk.items():
            if s not in routed.keys or len(a) == 0:
                continue
            ids = self._next_id + np.asarray(a.order, dtype=np.int64)
            numbered[s] = Arrivals({**a.columns, ID: ids}, a.order, a.arrival_ns)
            parts = routed.partitions_of(s, a.columns)
            labels[s] = np.asarray([self.slot_of[p] for p in range(self.spec.partitions)], dtype=np.int64)[parts]
        self._next_id += total
        results: Results = []
        late = {s: np.zeros(0, dtype=np.int64) for s in chunk}
        late_rows: dict[str, list[np.ndarray]] = {s: [] for s in labels}
        for slot, (share, rows_of) in split_by(numbered, labels).items():
            out = self.slots[slot].process(share)
            self._outputs[slot] += out.outputs
            results.extend(out.results)
            for s, rows in out.late.items():
                if len(rows):
                    late_rows[s].append(rows_of[s][rows])
        for s, pieces in late_rows.items():
            if pieces:
                late[s] = np.sort(np.concatenate(pieces))
        self.chunks += 1
        if self.chunks % self.adapt_every == 0:
            self.adapt()
            results.extend(self._cleaned)
            self._cleaned = []
        return GroupedResult(results, late)

    def measures(self) -> list[SlotMeasure]:
        return [
            SlotMeasure(i, slot.used_bytes, self._outputs[i], {p: g.stats for p, g in slot.groups.items()})
            for i, slot in enumerate(self.slots)
        ]

    @property
    def now_ts(self) -> int:
        return max((s.now_ts for s in self.slots if s.now_ts is not None), default=0)

    def adapt(self) -> list[Decision]:
        """One planning round, applied at once (so no adaptation overlaps another)."""
        decisions = plan(
            self.measures(),
            self.config,
            self.now_ts,
            query_bytes=self.query_bytes,
            forced_bytes=self._recently_forced(),
            relocate=self.relocate,
        )
        for decision in decisions:
            self.log.decisions.append((self.chunks, decision))
            if isinstance(decision, Move):
                self._move(decision)
            elif isinstance(decision, Cleanup):
                self._cleaned.extend(self.slots[decision.slot].cleanup(list(decision.parts), reinstate=True))
                self.log.cleaned_groups += len(decision.parts)
            else:
                freed = self.slots[decision.slot].push(list(decision.parts))
                self.log.pushed_bytes += freed
                if decision.forced:
                    self.log.forced_bytes += freed
                    self.log.forced_at.append((self.now_ts, freed))
        self._outputs = [0] * len(self.slots)
        return decisions

    def _recently_forced(self) -> int:
        """Bytes force-pushed within the last window (plus lateness) of event time. The paper bounds forced pushes
        by M_q - M_c over the run, its states only grow; with a sliding window the state is replaced every window
        and lateness (the span a tuple is held), so the allowance renews with it (never at once: size_ms may be 0)."""
        since = self.now_ts - self.spec.window.size_ms - self.spec.allowed_lateness_ms
        return sum(b for ts, b in self.log.forced_at if ts > since)

    def _move(self, move: Move) -> None:
        for part in move.parts:
            group = self.slots[move.sender].take_group(part)
            self.log.moved_bytes += group.stats.size_bytes
            self.slots[move.receiver].install_group(part, group)
            self.slot_of[part] = move.receiver

    def cleanup(self, reinstate: bool = False, progress: bool = False) -> Results:
        """Every slot's clean-up (at the end of a bounded run by default: merged state is dropped)."""
        out: Results = []
        for slot in self.slots:
            out.extend(slot.cleanup(reinstate=reinstate, progress=progress))
        return out
