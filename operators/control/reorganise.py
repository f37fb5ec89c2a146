"""Paper 000's reorganisation: classify slots by average occupancy, pair each supplier with a distinct consumer,
and let each supplier yield one group, giving the routing table's next version.

Suppliers are slots above th_sup, consumers below th_con, the rest neutral. The master pairs them in one scan
(busiest supplier with the idlest consumer, and so on); each supplier yields one group to its consumer. Which
group (`pick`):

- "random", the paper's rule: a randomly selected group; the draw is seeded by (seed, epoch, slot), so a
  replayed epoch decides the same moves. Under skew it can yield a group so heavy that the consumer becomes the
  new hot spot, or one so light that nothing changes, and the hot spot moves around from epoch to epoch.
- "balance": the group whose weight (its work in occupancy units, `work_occupancy`) comes closest to half the
  pair's occupancy gap, so the pair ends as even as one group can make it; a supplier none of whose groups
  narrows the gap (every one weighs at least the gap, or nothing) yields nothing.

A supplier holding a single group yields nothing (moving its only group moves the hot spot): it is reported as
hot, the case for a SplitJoin spread (control.hot). So is, with "balance", a supplier holding a whole partition
whose work alone is over th_sup (`heavy`): no slot can carry it without becoming a supplier, so moving it would
only chase the hot spot from slot to slot; it is spread instead, dividing its work. And so is, with "balance", a
supplier none of whose groups narrows the gap while its heaviest partition weighs at least the gap
(`stuck_partition`): with each slot's fixed work, no slot carries that partition better than the supplier.
Groups still in flight from an earlier move, groups held by damping (`unmovable`) and spread partitions stay put.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from windjoin.operators.partitioning import Group, RoutingTable

PICKS = ("random", "balance")
Pick = Literal["random", "balance"]


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
    """One epoch's reorganisation: the moves, the routing table carrying them, and suppliers left hot with the
    partition to spread for each (its only group, or the one too heavy for any slot)."""

    moves: tuple[Move, ...]
    routing: RoutingTable
    hot: tuple[int, ...]
    heavy: tuple[Group, ...] = ()  # per hot slot, in the same order


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


def pick_balancing(
    groups: list[Group], weights: Mapping[Group, float], supplier: float, consumer: float
) -> Group | None:
    """The group whose weight (in occupancy units) is nearest half the gap between supplier and consumer, among
    those lighter than the gap (moving one at least as heavy would leave the consumer as busy as the supplier
    was) that did some work (moving an idle one changes nothing); None if there is none. Ties: the lighter
    group, then the lower group."""
    gap = supplier - consumer
    lighter = [g for g in sorted(groups) if 0 < weights.get(g, 0.0) < gap]
    return min(lighter, key=lambda g: (abs(weights.get(g, 0.0) - gap / 2), weights.get(g, 0.0)), default=None)


def stuck_partition(groups: list[Group], weights: Mapping[Group, float], gap: float) -> Group | None:
    """A supplier's heaviest whole partition when it weighs at least the gap to its consumer: moving it would leave
    the consumer as busy as the supplier was (the hot spot chased from slot to slot), so when no group narrows
    the gap it is spread instead, though its work alone is not over th_sup (each slot's own fixed work makes it
    too heavy for any slot). `groups` are the movable ones (spread partitions are not). None if the heaviest is
    lighter than the gap."""
    whole = [g for g in sorted(groups) if g.depth == 0 and weights.get(g, 0.0) > 0]
    heaviest = max(whole, key=lambda g: (weights.get(g, 0.0), -g.partition), default=None)
    return heaviest if heaviest is not None and weights.get(heaviest, 0.0) >= gap > 0 else None


def work_occupancy(weights: Mapping[Group, float], occupancy: Mapping[int, float]) -> dict[Group, float]:
    """Each group's work in occupancy units: its share of all the work times the slots' summed occupancy (what a
    slot would carry holding it alone), comparable with the occupancy gap between two slots. Global, not per slot:
    a slot also holds shares of spread partitions, which its own groups' weights leave out (apportioning its
    occupancy among them alone would make them look heavier than they are); a spread partition's work counts
    over all its slots."""
    total = sum(max(0.0, w) for w in weights.values())
    busy = sum(occupancy.values())
    return {g: max(0.0, w) / total * busy for g, w in weights.items()} if total > 0 else {}


def plan_reorganisation(
    routing: RoutingTable,
    occupancy: Mapping[int, float],
    th_sup: float,
    th_con: float,
    epoch: int,
    seed: int = 0,
    in_flight: Collection[Group] = (),
    pick: Pick = "random",
    weights: Mapping[Group, float] | None = None,
    settling: Collection[int] = (),
) -> Plan:
    """Pair suppliers with distinct consumers and move one group from each, picked by `pick` ("balance" needs
    `weights`: each group's measured work in the epoch, any unit); `settling` slots neither give nor take a group
    (a recent move's effect is not measured yet); the routing version grows only when something moves."""
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {PICKS}, got {pick!r}")
    if pick == "balance" and weights is None:
        raise ValueError("pick 'balance' needs the groups' weights")
    classes = classify(occupancy, th_sup, th_con)
    classes = Classes(
        tuple(s for s in classes.suppliers if s not in settling),
        tuple(s for s in classes.consumers if s not in settling),
        classes.neutrals,
    )
    held: dict[int, list[Group]] = {}
    for group, slot in routing.groups().items():
        held.setdefault(slot, []).append(group)
    in_occupancy = work_occupancy(weights, occupancy) if pick == "balance" and weights is not None else {}
    spread = {Group(p) for p, _ in routing.spread}
    moves, hot, heavy = [], [], []
    consumers = iter(classes.consumers)
    for supplier in classes.suppliers:
        groups = held.get(supplier, [])
        too_heavy = [g for g in groups if g.depth == 0 and g not in spread and in_occupancy.get(g, 0.0) > th_sup]
        if len(groups) == 1 or too_heavy:
            hot.append(supplier)
            heavy.append(max(too_heavy or groups, key=lambda g: (in_occupancy.get(g, 0.0), -g.partition)))
            continue
        movable = [g for g in groups if g not in in_flight and g not in spread]
        if not movable:
            continue
        consumer = next(consumers, None)
        if consumer is None:
            continue
        if pick == "random":
            chosen: Group | None = pick_group(movable, seed, epoch, supplier)
        else:
            chosen = pick_balancing(movable, in_occupancy, occupancy[supplier], occupancy[consumer])
            stuck = stuck_partition(movable, in_occupancy, occupancy[supplier] - occupancy[consumer])
            if chosen is None and stuck is not None:
                hot.append(supplier)
                heavy.append(stuck)
        if chosen is not None:
            moves.append(Move(chosen, supplier, consumer))
    new_routing = routing.with_moves({m.group: m.target for m in moves}) if moves else routing
    return Plan(tuple(moves), new_routing, tuple(hot), tuple(heavy))
