"""Group moves between slots lose and duplicate no pair: real WindowJoins per slot against the global oracle.

Batches go to slots by the routing version current when they were sent; slots lag behind each other by
random amounts; state travels in end-of-moved-group markers that arrive after random delays; moves, splits into
mini-groups and merges happen between batches. The pairs of all slots together must equal the oracle's pairs
of one global join, and the audit must see every tuple joined exactly once, where its group's state was.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.models.control_sim import Cluster, equi_spec
from tests.models.move_protocol import EndOfMovedGroup, ProtocolError, SlotControl
from windjoin.operators.control.reorganise import plan_reorganisation
from windjoin.operators.partitioning import Group, RoutingTable
from windjoin.operators.testing.oracle import as_multiset, oracle_join

PARTITIONS, SLOTS = 4, 3


@st.composite
def event_streams(draw):
    n = draw(st.integers(0, 120))
    keys = draw(st.integers(1, 8))
    out, clock = [], 0
    for i in range(n):
        clock += draw(st.integers(0, 3))
        ts = max(0, clock - draw(st.integers(0, 6)))
        out.append({"stream": draw(st.sampled_from("RS")), "ts": ts, "k": draw(st.integers(0, keys)), "id": i})
    return out


def reorganise(cluster: Cluster, rnd: random.Random) -> None:
    """Random controller decisions: move groups, split a partition in two, or merge buddies on one slot."""
    table = cluster.routing
    units = table.groups()
    free = [g for g in sorted(units) if not any(g.covers(f) or f.covers(g) for f in cluster.in_flight)]
    if not free:
        return
    action = rnd.choice(["move", "move", "split", "merge"])
    if action == "move":
        picked = rnd.sample(free, rnd.randint(1, min(3, len(free))))
        moves = {g: rnd.choice([s for s in range(SLOTS) if s != units[g]]) for g in picked}
        cluster.publish(table.with_moves(moves))
    elif action == "split":
        g = rnd.choice(free)
        if g.depth < 3:
            new = {k: v for k, v in units.items() if k != g}
            for bit in (0, 1):
                new[Group(g.partition, g.depth + 1, g.pattern | (bit << g.depth))] = units[g]
            cluster.publish(table.with_units(new))
    else:
        for g in free:
            if g.depth == 0:
                continue
            buddy = Group(g.partition, g.depth, g.pattern ^ (1 << (g.depth - 1)))
            if buddy in free and units[buddy] == units[g]:
                parent = Group(g.partition, g.depth - 1, g.pattern & ((1 << (g.depth - 1)) - 1))
                new = {k: v for k, v in units.items() if k not in (g, buddy)}
                new[parent] = units[g]
                cluster.publish(table.with_units(new))
                return


def simulate(events, rnd, window_ms, batch_max=6, naive=False, audited=True) -> Cluster:
    spec = equi_spec(window_ms, PARTITIONS, SLOTS)
    cluster = Cluster(spec, RoutingTable.round_robin(PARTITIONS, SLOTS), rnd, naive=naive, audited=audited)
    pos = 0
    while pos < len(events):
        size = rnd.randint(1, batch_max)
        cluster.send(events[pos : pos + size])
        pos += size
        if rnd.random() < 0.5:
            reorganise(cluster, rnd)
        cluster.step()
    cluster.drain()
    return cluster


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(events=event_streams(), rnd=st.randoms(use_true_random=False), window_ms=st.integers(1, 30))
def test_moves_splits_and_merges_keep_the_global_join(events, rnd, window_ms):
    cluster = simulate(events, rnd, window_ms)
    expected, late = oracle_join(equi_spec(window_ms, PARTITIONS, SLOTS), events)
    assert late == []
    assert as_multiset(cluster.results) == as_multiset(expected)
    cluster.audit.finish(e["id"] for e in events)


def test_the_simulation_really_moves_state():
    """Enough moves with state in flight and lagging slots happen, so the property above is not vacuous."""
    rnd = random.Random(3)
    events = [{"stream": "RS"[i % 2], "ts": i // 3, "k": i % 7, "id": i} for i in range(600)]
    cluster = simulate(events, rnd, window_ms=50)
    expected, _ = oracle_join(equi_spec(50, PARTITIONS, SLOTS), events)
    assert cluster.moves_done >= 20
    assert max(g.depth for g in cluster.routing.groups()) >= 1 or cluster.routing.version >= 20
    assert len(expected) > 1000
    assert as_multiset(cluster.results) == as_multiset(expected)


def test_without_buffering_pairs_are_lost_and_the_audit_says_so():
    rnd = random.Random(3)
    events = [{"stream": "RS"[i % 2], "ts": i // 3, "k": i % 7, "id": i} for i in range(600)]
    with pytest.raises(ProtocolError, match="in transit"):
        simulate(events, random.Random(3), window_ms=50, naive=True)
    cluster = simulate(events, rnd, window_ms=50, naive=True, audited=False)
    expected, _ = oracle_join(equi_spec(50, PARTITIONS, SLOTS), events)
    assert as_multiset(cluster.results) != as_multiset(expected)


def test_policy_moves_through_the_protocol():
    """Moves planned by the reorganisation policy, epoch after epoch, run through the protocol exactly."""
    rnd = random.Random(11)
    spec = equi_spec(40, PARTITIONS * 4, SLOTS)
    cluster = Cluster(spec, RoutingTable.round_robin(PARTITIONS * 4, SLOTS), rnd)
    events = [{"stream": "RS"[i % 2], "ts": i // 4, "k": (i * 7919) % 23, "id": i} for i in range(900)]
    for epoch, start in enumerate(range(0, len(events), 30)):
        for pos in range(start, start + 30, 5):
            cluster.send(events[pos : pos + 5])
            cluster.step()
        occupancy = {s: rnd.random() for s in range(SLOTS)}
        plan = plan_reorganisation(cluster.routing, occupancy, 0.6, 0.4, epoch, in_flight=cluster.in_flight)
        if plan.moves:
            cluster.publish(plan.routing)
    cluster.drain()
    expected, _ = oracle_join(spec, events)
    assert cluster.moves_done >= 10
    assert as_multiset(cluster.results) == as_multiset(expected)
    cluster.audit.finish(e["id"] for e in events)


def test_protocol_refuses_misrouted_tuples_and_moves_in_flight():
    v0 = RoutingTable.round_robin(4, 2)
    v1 = v0.with_moves({Group(0): 1})
    a, b = SlotControl.start(0, v0), SlotControl.start(1, v0)
    markers, _ = a.advance(v1, lambda g: f"state of {g}")
    assert markers == [EndOfMovedGroup(Group(0), 1, 0, 1, "state of Group(partition=0, depth=0, pattern=0)")]
    with pytest.raises(ProtocolError, match="arrived"):
        a.admit(Group(0))  # the old slot no longer takes the group's tuples
    b.advance(v1)
    b.buffer(Group(0), "x")
    with pytest.raises(ProtocolError, match="moves again"):
        b.advance(v1.with_moves({Group(0): 0}))
    release = b.receive(markers[0])
    assert (release.state, release.buffered) == (markers[0].state, ["x"])
    with pytest.raises(ProtocolError, match="unexpected marker"):
        b.receive(markers[0])  # a duplicate marker must not install the state twice
    with pytest.raises(ProtocolError, match="step by one"):
        a.advance(v1.with_moves({Group(1): 0}).with_moves({Group(2): 1}))


def test_early_marker_waits_for_the_new_slot_to_reach_the_version():
    v0 = RoutingTable.round_robin(4, 2)
    v1 = v0.with_moves({Group(0): 1})
    a, b = SlotControl.start(0, v0), SlotControl.start(1, v0)
    (marker,), _ = a.advance(v1, lambda g: "S")
    assert b.receive(marker) is None  # b still processes version-0 batches
    _, releases = b.advance(v1)
    assert [(r.group, r.state, r.buffered) for r in releases] == [(Group(0), "S", [])]
    assert b.admit(Group(0)).value == "process"
