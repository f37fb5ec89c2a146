"""The typed state a control epoch's policies pass along: what the epoch observed and the decision so far.

A policy is one function `step(draft, seen, config) -> draft` (`Policy`): it reads the epoch's observations
(`EpochSeen`, the same for every step) and returns the draft decision with its own part filled in. The epoch
runs the policies in the order of `control.policies.POLICIES`, so adding a policy is one function added there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.declustering import UtilisationState
from windjoin.operators.control.load import EpochLoad
from windjoin.operators.control.memory import MemoryView, SpillRequest
from windjoin.operators.control.reorganise import Move
from windjoin.operators.partitioning import Group, RoutingTable


@dataclass(frozen=True)
class ControlState:
    """What the controller carries from one epoch to the next (and publishes as the control epoch)."""

    epoch: int
    routing: RoutingTable
    slots: int  # active slots 0..slots-1
    shed_ratio: float = 0.0
    sustained: UtilisationState = UtilisationState()
    spill: SpillRequest | None = None  # the latest disk request (memory adaptation), recorded until a newer one
    forced_bytes: int = 0  # active-disk's forced pushes so far (bounded by memory.query_bytes)
    moved_at: Mapping[Group, int] = field(default_factory=dict)  # unit -> the epoch that last moved it (damping)
    over_streak: Mapping[int, int] = field(default_factory=dict)  # slot -> epochs in a row over th_sup (damping)
    slot_moved_at: Mapping[int, int] = field(default_factory=dict)  # slot -> the epoch it last gave or took a unit

    @staticmethod
    def initial(partitions: int, slots: int) -> ControlState:
        return ControlState(0, RoutingTable.round_robin(partitions, slots), slots)


@dataclass(frozen=True)
class EpochSeen:
    """What one epoch observed, read by every policy: the previous state and the epoch's reports."""

    state: ControlState  # the previous epoch's
    load: EpochLoad
    in_flight: frozenset[Group] = frozenset()  # groups whose state still travels: they never move again first
    shed: int = 0  # records the adapter shed in the epoch's batches
    seconds: float = 0.0  # the wall-clock span of those batches
    arrival_rate: float | None = None  # records/s appended to the input topics since the last epoch
    fine: Mapping[int, np.ndarray] = field(default_factory=dict)  # window tuples by mini bits, per partition
    memory: MemoryView | None = None  # the slots' memory as reported
    fine_work: Mapping[int, np.ndarray] = field(default_factory=dict)  # join work by mini bits, per partition

    @cached_property
    def unit_shares(self) -> Mapping[int, np.ndarray]:
        """Per partition, the histogram that apportions its work among its mini-groups: the work by mini bits
        where reported, else the window tuples."""
        return {**self.fine, **self.fine_work}

    @cached_property
    def occupancy(self) -> dict[int, float]:
        """Each active slot's occupancy (0 for a slot that reported nothing)."""
        return {s: self.load.occupancy.get(s, 0.0) for s in range(self.state.slots)}


@dataclass(frozen=True)
class EpochDraft:
    """The next state and the epoch's decision as the policies build them, one step after another."""

    routing: RoutingTable
    slots: int
    shed_ratio: float
    sustained: UtilisationState
    spill: SpillRequest | None
    forced_bytes: int
    unmovable: frozenset[Group]  # groups no policy may move this epoch (in flight, frozen on disk)
    held: frozenset[Group] = frozenset()  # groups the reorganisation leaves put this epoch (damping)
    settling: frozenset[int] = frozenset()  # slots that neither give nor take a unit this epoch (damping)
    over_streak: Mapping[int, int] = field(default_factory=dict)  # slot -> epochs in a row over th_sup, this one in
    tau: float = 0.0
    moves: tuple[Move, ...] = ()
    hot: tuple[int, ...] = ()  # suppliers holding one group, or one too heavy for any slot (control.reorganise)
    heavy: tuple[Group, ...] = ()  # the partition to spread for each hot slot (control.hot)
    retuned: tuple[int, ...] = ()  # partitions re-cut into other mini-groups this epoch (fine tuning)
    settled: bool = False  # the epoch's routing change is chosen: later movers stand aside (one adaptation)

    @staticmethod
    def start(seen: EpochSeen) -> EpochDraft:
        """The draft before any policy: the previous state carried over, nothing moved."""
        s = seen.state
        return EpochDraft(s.routing, s.slots, s.shed_ratio, s.sustained, s.spill, s.forced_bytes, seen.in_flight)


Policy = Callable[[EpochDraft, EpochSeen, ControlConfig], EpochDraft]
