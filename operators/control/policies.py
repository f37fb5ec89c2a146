"""The control epoch's policies, one function each, and their order (`POLICIES`): the one place a policy is added.

Each is a `control.epoch_state.Policy`. The order matters: shedding and scaling read the epoch's utilisation;
fine tuning re-cuts partitions before anything moves them; memory adaptation may settle the epoch with a
relocation (no concurrent adaptations); damping holds the units moved lately; otherwise a shrinking epoch drains
the released slots and any other reorganises, and hot partitions are spread (or cooled ones gathered) last.
Groups are weighed by their work (`load.GROUP_MEASURE`: the job's per-partition seconds or CPU, which count the
output pairs), not by their tuples, unless the occupancy itself counts tuples.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace

from windjoin.operators.control.bounded import ceil_within, ratio
from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.declustering import (
    UtilisationState,
    declustering_step,
    drain_moves,
    utilisation_step,
)
from windjoin.operators.control.epoch_state import EpochDraft, EpochSeen, Policy
from windjoin.operators.control.finetune import retune_routing, unit_weights
from windjoin.operators.control.hot import plan_spread
from windjoin.operators.control.load import GROUP_MEASURE, EpochLoad, group_weights, utilisation
from windjoin.operators.control.memory import memory_step
from windjoin.operators.control.reorganise import Move, classify, plan_reorganisation, work_occupancy
from windjoin.operators.control.shedding import shed_ratio
from windjoin.operators.partitioning import Group, RoutingTable


def shedding(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """tau over the offered tuples, and the shed ratio it asks for (S2J's tau1 threshold)."""
    if config.utilisation.capacity is None:  # utilisation not measured: nothing shed
        return replace(draft, tau=0.0, shed_ratio=0.0)
    tau = offered_utilisation(seen.load, config, seen.state.slots, seen.shed, seen.seconds, seen.arrival_rate)
    shed = shed_ratio(tau, config.utilisation.tau1, config.shedding.base, config.shedding.model)
    return replace(draft, tau=tau, shed_ratio=shed)


def scaling(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """The slot count: S2J's sustained thresholds, or paper 000's supplier/consumer rule; at most one per
    partition."""
    slots, sustained = draft.slots, draft.sustained
    if config.scaling == "utilisation":
        if config.utilisation.capacity is not None:  # unset: utilisation is not measured, the count stays
            decision = utilisation_step(draft.tau, slots, sustained, config.utilisation)
            slots, sustained = decision.workers, decision.state
    else:
        r = config.reorganisation
        classes = classify(seen.occupancy, r.th_sup, r.th_con)
        quiet = 0 if classes.suppliers else sustained.below + 1  # epochs in a row without a supplier
        slots = declustering_step(classes, slots, config.declustering, quiet)
        sustained = UtilisationState(0, 0 if slots != draft.slots else quiet)  # a new count is judged afresh
    return replace(draft, slots=min(slots, draft.routing.partitions), sustained=sustained)


def fine_tuning(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """Re-cut partitions into mini-groups by their window tuples (paper 000), none whose state travels."""
    tuning = config.fine_tuning
    if not tuning.enabled:
        return draft
    frozen = {g.partition for g in seen.in_flight}
    routing = retune_routing(draft.routing, seen.fine, tuning.theta, tuning.max_depth, frozen)
    changed = {g for g, _ in routing.split} ^ {g for g, _ in draft.routing.split}  # mini-groups made or merged
    return replace(draft, routing=routing, retuned=tuple(sorted({g.partition for g in changed})))


def memory_adaptation(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """Paper 004's pushes and clean-ups as the epoch's spill request; a relocation settles the epoch's routing.
    Partitions with generations on disk (or asked to) are frozen for the movers after it."""
    mem = config.memory
    if not mem.enabled or seen.memory is None:
        return draft
    disk = memory_step(
        seen.memory, mem, draft.routing, seen.state.epoch + 1, draft.spill, draft.forced_bytes, mem.query_bytes
    )
    draft = replace(
        draft,
        spill=disk.request,
        forced_bytes=disk.forced_bytes,
        unmovable=draft.unmovable | {Group(p) for p in disk.frozen},
    )
    if not disk.moves:
        return draft
    routing = draft.routing.with_moves({mv.group: mv.target for mv in disk.moves})
    return replace(draft, slots=seen.state.slots, moves=disk.moves, routing=routing, settled=True)


def damping(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """Hold each unit moved within the last `reorganisation.hold_epochs` epochs where it is, and keep the slots
    that gave or took one from giving or taking another, unless the slot has been a supplier for that many epochs
    in a row (it stays over th_sup: the move did not relieve it, or overloaded it). A move takes two batches and
    the next epoch only partly measures it: without the hold the controller yields again from a slot already
    relieved (overshooting) and moves a heavy unit on before its effect shows (chasing the hot spot)."""
    r = config.reorganisation
    streak = {s: seen.state.over_streak.get(s, 0) + 1 if f > r.th_sup else 0 for s, f in seen.occupancy.items()}
    epoch = seen.state.epoch + 1  # the epoch this decision makes
    units = draft.routing.groups()
    held = frozenset(
        g
        for g, moved in seen.state.moved_at.items()
        if g in units and epoch - moved <= r.hold_epochs and streak.get(units[g], 0) < r.hold_epochs
    )
    settling = frozenset(
        s
        for s, moved in seen.state.slot_moved_at.items()
        if epoch - moved <= r.hold_epochs and streak.get(s, 0) < r.hold_epochs
    )
    return replace(draft, held=held, settling=settling, over_streak=streak)


def drain(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """A shrinking epoch empties the released (highest numbered) slots onto the others; while a group there is
    in flight, the slots stay and shrink in a later epoch."""
    current = seen.state.slots
    if draft.settled or draft.slots >= current:
        return draft
    weights = unit_weights(work_weights(seen, config), draft.routing, seen.unit_shares)
    drained = _drain(draft.routing, weights, draft.slots, current, draft.unmovable)
    if drained is None:
        return replace(draft, slots=current)
    routing = draft.routing.with_moves({m.group: m.target for m in drained}) if drained else draft.routing
    return replace(draft, moves=tuple(drained), routing=routing, settled=True)


def reorganisation(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """Suppliers yield groups to consumers (paper 000); new slots start empty and become consumers."""
    if draft.settled or draft.slots < seen.state.slots:
        return draft
    r = config.reorganisation
    weights = unit_weights(work_weights(seen, config), draft.routing, seen.unit_shares)
    unmovable = draft.unmovable | draft.held
    plan = plan_reorganisation(
        draft.routing,
        seen.occupancy,
        r.th_sup,
        r.th_con,
        seen.state.epoch,
        r.seed,
        unmovable,
        r.pick,
        weights,
        draft.settling,
    )
    return replace(draft, moves=plan.moves, hot=plan.hot, heavy=plan.heavy, routing=plan.routing, settled=True)


def hot_spread(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
    """Spread each hot slot's heavy partition over k slots (its own and the least occupied others), k by its work;
    gather a spread partition back to its home slot once its work (over all its slots) is under th_con."""
    if not config.hot.spread:
        return draft
    th_con = config.reorganisation.th_con
    routing, occupancy = draft.routing, seen.occupancy
    work = work_occupancy(work_weights(seen, config), occupancy)
    spread = dict(routing.spread)
    for slot, group in zip(draft.hot, draft.heavy, strict=True):
        if group.depth or group.partition in spread or group in draft.unmovable:
            continue
        share = work.get(group, occupancy[slot]) / th_con if th_con > 0 else math.inf  # th_con may be 0
        k = ceil_within(share, 0, min(config.hot.max_width, len(occupancy)))
        if k >= 2:
            routing = routing.with_spread(group.partition, plan_spread(group, slot, k, occupancy).slots)
    for partition, slots in spread.items():
        group = Group(partition)
        if group not in draft.unmovable and group in work and work[group] < th_con:
            routing = routing.with_spread(partition, (slots[0],))
    return replace(draft, routing=routing)


def work_weights(seen: EpochSeen, config: ControlConfig) -> Mapping[Group, float]:
    """Each reported partition's work in the epoch, by the measure that matches the occupancy kind."""
    return group_weights(seen.load, GROUP_MEASURE[config.reorganisation.occupancy])


POLICIES: tuple[Policy, ...] = (
    shedding,
    scaling,
    fine_tuning,
    memory_adaptation,
    damping,
    drain,
    reorganisation,
    hot_spread,
)


def offered_utilisation(
    load: EpochLoad,
    config: ControlConfig,
    workers: int,
    shed: int = 0,
    seconds: float = 0.0,
    arrival_rate: float | None = None,
) -> float:
    """tau = w / W: arrivals per second and worker, or over the offered tuples (joined + shed) per second of
    batch time and worker, or per batch and worker (`utilisation.measure`).

    S2J's w is the incoming workload. The load reports count the tuples that reached the join, so the shed
    ones are added back: otherwise an epoch shedding a ratio SR would measure tau * (1 - SR), switch shedding
    off while the burst lasts and oscillate between shedding and not."""
    u = config.utilisation
    if u.capacity is None:
        raise ValueError("utilisation.capacity is not set: utilisation is not measured")
    if u.measure == "arrivals" and arrival_rate is not None:
        return ratio(arrival_rate, workers * u.capacity)
    if u.measure in ("rate", "arrivals"):
        offered = sum(x.tuples_in for x in load.slot_load.values()) + shed
        return ratio(offered, seconds * workers * u.capacity)
    return utilisation(load, u.capacity, workers) + ratio(shed, load.batches * workers * u.capacity)


def _drain(
    routing: RoutingTable, weights: Mapping[Group, float], keep: int, current: int, in_flight: Collection[Group]
) -> list[Move] | None:
    """Moves emptying slots keep..current-1 onto slots 0..keep-1, or None if a group there is in flight."""
    units = routing.groups()
    if any(units[g] >= keep for g in units if any(g.covers(f) or f.covers(g) for f in in_flight)):
        return None
    moves = []
    placed = dict(units)
    for leaving in range(current - 1, keep - 1, -1):
        remaining = {g: s for g, s in placed.items() if s < keep or s == leaving}
        for m in drain_moves(remaining, weights, leaving, targets=range(keep)):
            placed[m.group] = m.target
            moves.append(m)
    return moves
