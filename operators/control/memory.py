"""Memory adaptation in the control epoch (paper 004): from the slots' memory measures to what the job applies.

The planner (`operators.spill.planner`) decides pushes, relocations and clean-ups; this step turns them into the
job's two levers: a `SpillRequest` (partitions whose holder pushes them to disk, partitions whose generations are
merged), taken into exactly one batch, and routing moves (a relocation is a partition move with its window
state, carried like paper 000's reorganisation).

One request is outstanding at a time: until the job's reports say it took the request (their `spill_version`),
nothing new is decided and the request's partitions stay where they are. That is the paper's "no concurrent
adaptations", and it keeps a partition that is about to get generations on disk from being handed over, which
the job refuses. Partitions with pushed generations never move (the paper's second restriction).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from windjoin.operators.control.reorganise import Move
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.planner import Cleanup, Push, SlotMeasure, plan
from windjoin.operators.spill.planner import Move as Relocation


@dataclass(frozen=True)
class SpillRequest:
    """A controller decision to push partitions to disk and/or clean partitions up, taken into one batch."""

    version: int
    spill: tuple[int, ...] = ()
    cleanup: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "spill": list(self.spill), "cleanup": list(self.cleanup)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> SpillRequest:
        return SpillRequest(
            int(data["version"]),
            tuple(int(p) for p in data.get("spill", ())),
            tuple(int(p) for p in data.get("cleanup", ())),
        )


@dataclass(frozen=True)
class MemoryView:
    """What the job's load reports say of memory: each active slot's measure (groups by partition), the last
    spill request version the job took, and the time of the newest report (ms, the planner's T_c)."""

    slots: tuple[SlotMeasure, ...]
    taken_version: int
    now_ms: int


@dataclass(frozen=True)
class MemoryStep:
    """One epoch's memory adaptation: the request to record (the last one while it is outstanding), the
    relocation moves, the partitions no other move may touch this epoch, active-disk's forced bytes so far."""

    request: SpillRequest | None
    moves: tuple[Move, ...]
    frozen: frozenset[int]
    forced_bytes: int


def memory_step(
    view: MemoryView,
    config: MemoryAdaptationConfig,
    routing: RoutingTable,
    version: int,
    last: SpillRequest | None,
    forced_bytes: int = 0,
    query_bytes: int | None = None,
) -> MemoryStep:
    """Plan this epoch's adaptations; a new request gets `version` (the new epoch number: versions grow across
    controller restarts). Groups are counted at the slot the routing table places them on."""
    slots = tuple(_placed(m, routing) for m in view.slots)
    on_disk = {p for m in slots for p, g in m.groups.items() if g.disk_generations}
    if last is not None and view.taken_version < last.version:  # outstanding: wait for the job to take it
        return MemoryStep(last, (), frozenset(on_disk | set(last.spill) | set(last.cleanup)), forced_bytes)
    decisions = plan(slots, config, view.now_ms, query_bytes=query_bytes, forced_bytes=forced_bytes)
    spill = sorted({p for d in decisions if isinstance(d, Push) for p in d.parts})
    cleanup = sorted({p for d in decisions if isinstance(d, Cleanup) for p in d.parts})
    sizes = {(m.slot, p): g.size_bytes for m in slots for p, g in m.groups.items()}
    forced = sum(sizes[(d.slot, p)] for d in decisions if isinstance(d, Push) and d.forced for p in d.parts)
    moves = tuple(Move(Group(p), d.sender, d.receiver) for d in decisions if isinstance(d, Relocation) for p in d.parts)
    request = SpillRequest(version, tuple(spill), tuple(cleanup)) if spill or cleanup else last
    frozen = on_disk | set(spill) | set(cleanup)
    return MemoryStep(request, moves, frozenset(frozen), forced_bytes + forced)


def _placed(measure: SlotMeasure, routing: RoutingTable) -> SlotMeasure:
    """The measure with only the groups the routing table places on its slot (a partition just moved away is
    reported by its old slot until the hand-over)."""
    groups = {p: g for p, g in measure.groups.items() if routing.holders(p) == (measure.slot,)}
    return replace(measure, groups=groups)
