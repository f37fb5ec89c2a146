"""Paper 000's reorganisation: classify slots by average occupancy, pair each supplier with a distinct consumer,
and let each supplier yield one group, giving the routing table's next version.

Suppliers are slots above th_sup, consumers below th_con, the rest neutral. The master pairs them in one scan
(busiest supplier with the idlest consumer, and so on); each supplier yields one randomly selected group, as
in the paper; the draw is seeded by (seed, epoch, slot), so a replayed epoch decides the same moves. A supplier
holding a single group yields nothing (moving its only group moves the hot spot): it is reported as hot, the
case for a SplitJoin spread (control.hot). Groups still in flight from an earlier move stay put.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from windjoin.operators.partitioning import Group, RoutingTable


@dataclass(frozen=True)
class Classes:
    suppliers: tuple[int, ...]  # busiest first
    consumers: tuple[int, ...]  # idlest first
    neutrals: tuple[int, ...]


@dataclass(frozen=True)
class Move:
    group: Group
    source: int
    target: int


@dataclass(frozen=True)
class Plan:
    """One epoch's reorganisation: the moves, the routing table carrying them, and suppliers left hot."""

    moves: tuple[Move, ...]
    routing: RoutingTable
    hot: tuple[int, ...]


def classify(occupancy: Mapping[int, float], th_sup: float, th_con: float) -> Classes:
    """Suppliers (f > th_sup), consumers (f < th_con) and neutrals; ties broken by slot number."""
    if not 0 <= th_con < th_sup:
        raise ValueError(f"need 0 <= th_con < th_sup, got th_con={th_con}, th_sup={th_sup}")
    suppliers = sorted((s for s, f in occupancy.items() if f > th_sup), key=lambda s: (-occupancy[s], s))
    consumers = sorted((s for s, f in occupancy.items() if f < th_con), key=lambda s: (occupancy[s], s))
    neutrals = sorted(s for s, f in occupancy.items() if th_con <= f <= th_sup)
    return Classes(tuple(suppliers), tuple(consumers), tuple(neutrals))


def pick_group(groups: list[Group], seed: int, epoch: int, slot: int) -> Group:
    """The paper's random choice of the yielded group, drawn reproducibly from (seed, epoch, slot)."""
    digest = hashlib.blake2b(f"{seed}:{epoch}:{slot}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big")).choice(sorted(groups))


def plan_reorganisation(
    routing: RoutingTable,
    occupancy: Mapping[int, float],
    th_sup: float,
    th_con: float,
    epoch: int,
    seed: int = 0,
    in_flight: Collection[Group] = (),
) -> Plan:
    """Pair suppliers with distinct consumers and move one group from each; the routing version grows only
    when something moves."""
    classes = classify(occupancy, th_sup, th_con)
    held: dict[int, list[Group]] = {}
    for group, slot in routing.groups().items():
        held.setdefault(slot, []).append(group)
    moves, hot = [], []
    consumers = iter(classes.consumers)
    for supplier in classes.suppliers:
        groups = held.get(supplier, [])
        movable = [g for g in groups if g not in in_flight]
        if len(groups) <= 1 or not movable:
            if len(groups) == 1:
                hot.append(supplier)
            continue
        consumer = next(consumers, None)
        if consumer is not None:
            moves.append(Move(pick_group(movable, seed, epoch, supplier), supplier, consumer))
    new_routing = routing.with_moves({m.group: m.target for m in moves}) if moves else routing
    return Plan(tuple(moves), new_routing, tuple(hot))
