"""A simulated cluster for the controller's protocols: one real WindowJoin per slot, lagging slot inboxes,
a control topic with delays, and the pairs of every slot gathered for comparison with the oracle."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tests.models.move_protocol import Disposition, MoveAudit, SlotControl
from windjoin.operators.control.window_rows import take_rows
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import Group, RoutingTable, key_hash, mini_bits, partition_of_hash
from windjoin.operators.spec import JoinSpec, parse_spec
from windjoin.operators.testing import join_events

NO_LATENESS = 10**12  # slots see their groups' tuples at different times; lateness is not what is tested here


def equi_spec(window_ms: int, partitions: int, slots: int) -> dict:
    fields = {"k": "int", "id": "int"}
    return {
        "window": {"kind": "time", "size_ms": window_ms},
        "allowed_lateness_ms": NO_LATENESS,
        "streams": {"R": {"fields": fields, "key": "k"}, "S": {"fields": fields, "key": "k"}},
        "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
        "partitions": partitions,
        "slots": slots,
    }


def group_of(key: int, routing: RoutingTable) -> Group:
    h = key_hash(np.array([key], dtype=np.int64))
    parts, bits = partition_of_hash(h, routing.partitions), mini_bits(h, routing.partitions)
    found = [g for g in routing.groups() if g.contains(parts, bits)[0]]
    assert len(found) == 1, f"key {key} is in {found}"
    return found[0]


class SimSlot:
    def __init__(self, slot: int, routing: RoutingTable, spec: JoinSpec) -> None:
        self.slot = slot
        self.spec = spec
        self.control = SlotControl.start(slot, routing)
        self.join = WindowJoin(spec)
        self.inbox: deque[tuple[int, list[dict]]] = deque()

    def extract(self, group: Group) -> dict[str, dict[str, np.ndarray]]:
        def select(columns):
            h = key_hash(columns["k"].astype(np.int64))
            n = self.control.routing.partitions
            return group.contains(partition_of_hash(h, n), mini_bits(h, n))

        return {s: take_rows(self.join, s, select) for s in self.join.stores}

    def install(self, state: dict[str, dict[str, np.ndarray]]) -> None:
        for stream, columns in state.items():
            if len(columns["k"]):
                self.join.preload(stream, columns)

    def run(self, events: list[dict]) -> list[tuple]:
        if not events:
            return []
        return join_events(self.spec, events, len(events), self.join).rows(self.spec)  # one chunk


@dataclass
class Cluster:
    """Slots with lagging inboxes; batches carry their routing version; markers travel with random delays."""

    spec_dict: dict
    routing: RoutingTable
    rnd: random.Random
    naive: bool = False  # process a moving group's tuples at once instead of buffering them (a broken protocol)
    audited: bool = True
    versions: dict[int, RoutingTable] = field(default_factory=dict)
    results: list[tuple] = field(default_factory=list)
    control_topic: list[tuple[int, object]] = field(default_factory=list)
    in_flight: set[Group] = field(default_factory=set)
    step_no: int = 0
    moves_done: int = 0

    def __post_init__(self) -> None:
        self.spec = parse_spec(self.spec_dict)
        self.versions[self.routing.version] = self.routing
        self.slots = [SimSlot(s, self.routing, self.spec) for s in range(self.spec.slots)]
        self.audit = MoveAudit(self.routing)

    def publish(self, new: RoutingTable) -> None:
        """The controller's decision: a new routing version for the next batches."""
        for group in new.moves_from(self.routing):
            self.in_flight.add(group)
        self.routing = new
        self.versions[new.version] = new

    def send(self, events: list[dict]) -> None:
        """One batch, routed by the current version, delivered to every slot's inbox (empty shares too)."""
        share: dict[int, list[dict]] = {s: [] for s in range(len(self.slots))}
        for e in events:
            share[self.routing.groups()[group_of(e["k"], self.routing)]].append(e)
        for s, slot in enumerate(self.slots):
            slot.inbox.append((self.routing.version, share[s]))

    def step(self, max_batches: int = 2) -> None:
        """Each slot processes 0..max_batches queued batches; due markers are delivered."""
        self.step_no += 1
        for slot in self.rnd.sample(self.slots, len(self.slots)):
            for _ in range(self.rnd.randint(0, max_batches)):
                if slot.inbox:
                    self._process(slot, *slot.inbox.popleft())
        due = [m for t, m in self.control_topic if t <= self.step_no]
        self.control_topic = [(t, m) for t, m in self.control_topic if t > self.step_no]
        for marker in due:
            slot = self.slots[marker.target]
            release = slot.control.receive(marker)
            if release is not None:
                self._release(slot, release)

    def drain(self) -> None:
        while any(s.inbox for s in self.slots) or self.control_topic:
            self.step()

    def _process(self, slot: SimSlot, version: int, events: list[dict]) -> None:
        while slot.control.routing.version < version:
            new = self.versions[slot.control.routing.version + 1]
            markers, releases = slot.control.advance(new, slot.extract)
            for m in markers:
                if self.audited:
                    self.audit.handed_over(m.group, m.source, m.target)
                self.control_topic.append((self.step_no + self.rnd.randint(0, 3), m))
            for release in releases:
                self._release(slot, release)
        now = []
        for e in events:
            group = group_of(e["k"], slot.control.routing)
            if slot.control.admit(group) is Disposition.BUFFER and not self.naive:
                slot.control.buffer(group, (group, e))
            else:
                now.append((group, e))
        self._run(slot, now)

    def _release(self, slot: SimSlot, release) -> None:
        slot.install(release.state)
        if self.audited:
            self.audit.installed(release.group, slot.slot)
        self.in_flight.discard(release.group)
        self.moves_done += 1
        self._run(slot, release.buffered)

    def _run(self, slot: SimSlot, items: list[tuple[Group, dict]]) -> None:
        for group, e in items:
            if self.audited:
                self.audit.processed(e["id"], group, slot.slot)
        self.results.extend(slot.run([e for _, e in items]))
