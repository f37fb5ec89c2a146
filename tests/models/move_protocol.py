"""The group-move protocol as pure state: deactivate at the old slot, end-of-moved-group marker, buffer at the
new slot until the state arrives, reactivate.

A routing version takes effect for a slot when the slot reaches the first batch routed by it: every earlier
batch, carrying the old placement, has been processed there. At that point (`advance`):
  - the old slot deactivates each group moving away and hands it over: the caller extracts the group's window
    state and sends it with an `EndOfMovedGroup` marker (through a control topic, say), in any delay;
  - the new slot marks each group moving in as awaiting: its new tuples are buffered (`admit` says BUFFER).
When the marker reaches the new slot (`receive`), the caller installs the state, then processes the buffered
tuples in arrival order, and the group is active there. A tuple is thus joined at exactly one slot: the one
holding its group's state, after every tuple of the group that arrived before it. A marker may overtake the
new slot's own version change; it is then kept and released by `advance`.

`MoveAudit` checks these invariants from the outside over a whole run: each tuple processed once, only where
its group's state is and never while that state is in transit, and every handed-over state installed once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from windjoin.operators.partitioning import Group, RoutingTable


class ProtocolError(RuntimeError):
    """A step that would lose or duplicate tuples (misrouted tuple, marker for an unexpected group, ...)."""


class Disposition(Enum):
    PROCESS = "process"
    BUFFER = "buffer"


@dataclass(frozen=True)
class EndOfMovedGroup:
    """Sent by the old slot after its last tuple of `group`; `state` is the group's window state (opaque)."""

    group: Group
    version: int  # the routing version that moved the group
    source: int
    target: int
    state: Any = None


@dataclass(frozen=True)
class Release:
    """A group ready at its new slot: install `state`, then process `buffered` in order."""

    group: Group
    state: Any
    buffered: list[Any]


@dataclass
class SlotControl:
    """One slot's protocol state: the groups it holds, those it waits for, and their buffered tuples."""

    slot: int
    routing: RoutingTable
    active: set[Group] = field(default_factory=set)
    awaiting: dict[Group, list[Any]] = field(default_factory=dict)
    early: dict[Group, EndOfMovedGroup] = field(default_factory=dict)

    @staticmethod
    def start(slot: int, routing: RoutingTable) -> SlotControl:
        return SlotControl(slot, routing, {g for g, s in routing.groups().items() if s == slot})

    def advance(self, new: RoutingTable, state_of: Any = None) -> tuple[list[EndOfMovedGroup], list[Release]]:
        """Switch to the next routing version: markers for the groups leaving (with `state_of(group)` as their
        state, if given) and releases for groups whose marker came early."""
        if new.version != self.routing.version + 1:
            raise ProtocolError(f"slot {self.slot}: version {new.version} after {self.routing.version}; step by one")
        moves = new.moves_from(self.routing)
        for group, (source, _) in moves.items():
            if self._in_flight(group):
                raise ProtocolError(f"slot {self.slot}: {group} moves again before its state arrived")
            if source == self.slot and not self._holds(group):
                raise ProtocolError(f"slot {self.slot}: asked to hand over {group}, whose state is not here")
        for group in new.groups():
            if group not in self.awaiting and self._in_flight(group):
                raise ProtocolError(f"slot {self.slot}: {group} is split or merged before its state arrived")
        markers, releases = [], []
        for group, (source, target) in sorted(moves.items()):
            if source == self.slot:
                state = state_of(group) if state_of is not None else None
                markers.append(EndOfMovedGroup(group, new.version, source, target, state))
            elif target == self.slot:
                self.awaiting[group] = []
        self.routing = new
        mine = {g for g, s in new.groups().items() if s == self.slot}
        self.active = mine - set(self.awaiting)
        for group in sorted(set(self.early) & set(self.awaiting)):
            releases.append(self._release(self.early.pop(group)))
        return markers, releases

    def admit(self, group: Group) -> Disposition:
        """What to do with a tuple of `group` in a batch of the current version."""
        if group in self.active:
            return Disposition.PROCESS
        if group in self.awaiting:
            return Disposition.BUFFER
        raise ProtocolError(
            f"slot {self.slot}: a tuple of {group} arrived, which version {self.routing.version} "
            f"places on slot {self.routing.groups().get(group)}"
        )

    def buffer(self, group: Group, item: Any) -> None:
        self.awaiting[group].append(item)

    def receive(self, marker: EndOfMovedGroup) -> Release | None:
        """The state of a group moving here arrived: its release, or None when this slot has not yet reached the
        version that moves it (the marker is kept until `advance`)."""
        if marker.target != self.slot:
            raise ProtocolError(f"slot {self.slot}: marker for slot {marker.target} ({marker.group})")
        if marker.group in self.awaiting:
            return self._release(marker)
        if marker.version <= self.routing.version or marker.group in self.early:
            raise ProtocolError(f"slot {self.slot}: unexpected marker for {marker.group} (version {marker.version})")
        self.early[marker.group] = marker
        return None

    def _release(self, marker: EndOfMovedGroup) -> Release:
        buffered = self.awaiting.pop(marker.group)
        self.active.add(marker.group)
        return Release(marker.group, marker.state, buffered)

    def _holds(self, group: Group) -> bool:
        return any(g.covers(group) or group.covers(g) for g in self.active)

    def _in_flight(self, group: Group) -> bool:
        return any(g.covers(group) or group.covers(g) for g in self.awaiting)

    @property
    def in_flight(self) -> set[Group]:
        return set(self.awaiting)


class MoveAudit:
    """An outside check of a run: where each group's state is, and that each tuple is joined exactly once there."""

    def __init__(self, routing: RoutingTable) -> None:
        self.holder: dict[Group, int] = dict(routing.groups())
        self.in_transit: dict[Group, tuple[int, int]] = {}
        self.processed_at: dict[Hashable, int] = {}

    def processed(self, tuple_id: Hashable, group: Group, slot: int) -> None:
        if tuple_id in self.processed_at:
            raise ProtocolError(f"tuple {tuple_id!r} joined twice (slots {self.processed_at[tuple_id]} and {slot})")
        where = self._where(group)
        if where != slot:
            raise ProtocolError(f"tuple {tuple_id!r} of {group} joined at slot {slot}; its state is at {where}")
        self.processed_at[tuple_id] = slot

    def handed_over(self, group: Group, source: int, target: int) -> None:
        where = self._where(group)
        if where != source:
            raise ProtocolError(f"{group} handed over by slot {source}; its state is at {where}")
        self._refine(group)
        del self.holder[group]
        self.in_transit[group] = (source, target)

    def installed(self, group: Group, target: int) -> None:
        if self.in_transit.get(group, (None, None))[1] != target:
            raise ProtocolError(f"{group} installed at slot {target} but not in transit there")
        del self.in_transit[group]
        self.holder[group] = target

    def finish(self, tuple_ids: Iterable[Hashable]) -> None:
        """At the end of a run: nothing in transit, every tuple joined."""
        if self.in_transit:
            raise ProtocolError(f"state still in transit: {sorted(self.in_transit)}")
        missing = set(tuple_ids) - set(self.processed_at)
        if missing:
            raise ProtocolError(f"{len(missing)} tuples never joined, e.g. {sorted(missing, key=repr)[:5]}")

    def _where(self, group: Group) -> int | str:
        if any(g.covers(group) or group.covers(g) for g in self.in_transit):
            return "in transit"
        slots = {s for g, s in self.holder.items() if g.covers(group) or group.covers(g)}
        if len(slots) != 1:
            return f"split over slots {sorted(slots)}" if slots else "nowhere"
        return slots.pop()

    def _refine(self, group: Group) -> None:
        """Record the holder at `group`'s granularity: split a coarser entry covering it into halves."""
        while group not in self.holder:
            coarse = next((g for g in self.holder if g.covers(group)), None)
            if coarse is None:
                finer = [g for g in self.holder if group.covers(g)]
                slot = self.holder[finer[0]]
                for g in finer:
                    del self.holder[g]
                self.holder[group] = slot
                return
            slot = self.holder.pop(coarse)
            for bit in (0, 1):
                self.holder[Group(coarse.partition, coarse.depth + 1, coarse.pattern | (bit << coarse.depth))] = slot
