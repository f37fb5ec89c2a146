"""One control epoch: from the epoch's load to the next control state (routing, slot count, shed ratio).

The order within an epoch: utilisation tau (over the tuples *offered* to the join: those it joined plus those
the adapter shed, so an epoch that shed is not mistaken for a light one) decides the shed ratio and whether
the slot count changes (S2J's thresholds, or paper 000's supplier/consumer rule); a shrinking epoch drains the
released slots (the highest numbered) onto the others instead of reorganising; otherwise suppliers yield groups
to consumers. New slots start empty and become consumers in the next epoch. Groups whose state is still
travelling (`in_flight`, cleared by the caller as the join job acknowledges installs) never move again before
they land.

With `fine_tuning.enabled`, the epoch first re-cuts partitions into mini-groups by their reported window tuples
(paper 000's fine tuning, control.finetune): a new mini-group stays on its parent's slot, buddies merge only on
one slot, and the drain or reorganisation that follows moves mini-groups like partitions, weighing each by its
share of its partition's tuples. So a slot hot with one big partition gets units it can yield.

With `memory.enabled` (paper 004, control.memory), the epoch first plans memory adaptation from the reported
memory: pushes and clean-ups become the epoch's spill request, and a relocation is the epoch's only routing
change (no concurrent adaptations: the reorganisation waits for the next epoch). Partitions with generations on
disk, or in a request the job has not taken yet, are frozen: no reorganisation or drain moves them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import numpy as np

from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.declustering import (
    UtilisationState,
    declustering_step,
    drain_moves,
    utilisation_step,
)
from windjoin.operators.control.finetune import retune_routing, unit_weights
from windjoin.operators.control.hot import plan_spread
from windjoin.operators.control.load import GROUP_MEASURE, EpochLoad, group_weights, utilisation
from windjoin.operators.control.memory import MemoryView, SpillRequest, memory_step
from windjoin.operators.control.reorganise import Move, classify, plan_reorganisation
from windjoin.operators.control.shedding import shed_ratio
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

    @staticmethod
    def initial(partitions: int, slots: int) -> ControlState:
        return ControlState(0, RoutingTable.round_robin(partitions, slots), slots)


@dataclass(frozen=True)
class Decision:
    state: ControlState
    tau: float
    moves: tuple[Move, ...]
    hot: tuple[int, ...]  # suppliers holding one group: candidates for a spread (control.hot)
    retuned: tuple[int, ...] = ()  # partitions re-cut into other mini-groups this epoch (fine tuning)


def control_step(
    state: ControlState,
    load: EpochLoad,
    config: ControlConfig,
    in_flight: Collection[Group] = (),
    shed: int = 0,
    seconds: float = 0.0,
    arrival_rate: float | None = None,
    fine: Mapping[int, np.ndarray] | None = None,
    memory: MemoryView | None = None,
) -> Decision:
    """The next control state from this epoch's load; `shed`: records the adapter shed in the epoch's batches,
    `seconds`: the wall-clock span of those batches (for `utilisation.measure: rate`), `arrival_rate`: records
    per second appended to the input topics since the last epoch (for `arrivals`; without it, `rate` is used),
    `fine`: each partition's latest window tuples by mini bits (for `fine_tuning`; partitions missing keep
    their units), `memory`: the slots' memory as reported (for `memory`; without it nothing is decided there).

    S2J's w is the incoming workload. The load reports count the tuples that reached the join, so the shed
    ones are added back: otherwise an epoch shedding a ratio SR would measure tau * (1 - SR), switch shedding
    off while the burst lasts and oscillate between shedding and not."""
    tau = offered_utilisation(load, config, state.slots, shed, seconds, arrival_rate)
    ratio = shed_ratio(tau, config.utilisation.tau1, config.shedding.base, config.shedding.model)
    occupancy = {s: load.occupancy.get(s, 0.0) for s in range(state.slots)}
    r = config.reorganisation
    sustained = state.sustained
    if config.scaling == "utilisation":
        decision = utilisation_step(tau, state.slots, sustained, config.utilisation)
        slots, sustained = decision.workers, decision.state
    else:
        slots = declustering_step(classify(occupancy, r.th_sup, r.th_con), state.slots, config.declustering)
    slots = min(slots, state.routing.partitions)
    moves: tuple[Move, ...] = ()
    hot: tuple[int, ...] = ()
    routing, fine = state.routing, fine or {}
    tuning = config.fine_tuning
    if tuning.enabled:
        frozen = {g.partition for g in in_flight}
        routing = retune_routing(routing, fine, tuning.theta, tuning.max_depth, frozen)
    changed = {g for g, _ in routing.split} ^ {g for g, _ in state.routing.split}  # mini-groups made or merged
    retuned = tuple(sorted({g.partition for g in changed}))
    spill, forced_bytes = state.spill, state.forced_bytes
    unmovable = set(in_flight)
    relocated: tuple[Move, ...] = ()
    if config.memory.enabled and memory is not None:
        mem = config.memory
        disk = memory_step(memory, mem, routing, state.epoch + 1, spill, forced_bytes, mem.query_bytes)
        spill, forced_bytes, relocated = disk.request, disk.forced_bytes, disk.moves
        unmovable |= {Group(p) for p in disk.frozen}
    if relocated:
        slots, moves = state.slots, relocated
        routing = routing.with_moves({mv.group: mv.target for mv in moves})
    if not relocated and slots < state.slots:
        drained = _drain(routing, unit_weights(group_weights(load), routing, fine), slots, state.slots, unmovable)
        if drained is None:
            slots = state.slots  # a released slot still waits for state: shrink in a later epoch
        else:
            moves = tuple(drained)
            routing = routing.with_moves({m.group: m.target for m in moves}) if moves else routing
    if not relocated and slots >= state.slots:
        weights = unit_weights(group_weights(load, GROUP_MEASURE[r.occupancy]), routing, fine)
        plan = plan_reorganisation(
            routing, occupancy, r.th_sup, r.th_con, state.epoch, r.seed, unmovable, r.pick, weights
        )
        moves, hot, routing = plan.moves, plan.hot, plan.routing
        if config.hot.spread:
            routing = _spread_hot(routing, hot, occupancy, config)
    new_state = replace(
        state,
        epoch=state.epoch + 1,
        routing=routing,
        slots=slots,
        shed_ratio=ratio,
        sustained=sustained,
        spill=spill,
        forced_bytes=forced_bytes,
    )
    return Decision(new_state, tau, moves, hot, retuned)


def _spread_hot(
    routing: RoutingTable, hot: tuple[int, ...], occupancy: dict[int, float], config: ControlConfig
) -> RoutingTable:
    """Spread each hot slot's single unspread partition over k slots (its own and the least occupied others)."""
    units = routing.groups()
    spread = {p for p, _ in routing.spread}
    for slot in hot:
        group = next(g for g, s in units.items() if s == slot)
        if group.depth or group.partition in spread:
            continue
        k = min(config.hot.max_width, len(occupancy), math.ceil(occupancy[slot] / config.reorganisation.th_con))
        if k >= 2:
            routing = routing.with_spread(group.partition, plan_spread(group, slot, k, occupancy).slots)
    return routing


def offered_utilisation(
    load: EpochLoad,
    config: ControlConfig,
    workers: int,
    shed: int = 0,
    seconds: float = 0.0,
    arrival_rate: float | None = None,
) -> float:
    """tau = w / W: arrivals per second and worker, or over the offered tuples (joined + shed) per second of
    batch time and worker, or per batch and worker (`utilisation.measure`)."""
    u = config.utilisation
    if u.measure == "arrivals" and arrival_rate is not None:
        return arrival_rate / workers / u.capacity if workers else 0.0
    if u.measure in ("rate", "arrivals"):
        offered = sum(x.tuples_in for x in load.slot_load.values()) + shed
        return offered / seconds / workers / u.capacity if seconds > 0 and workers else 0.0
    tau = utilisation(load, u.capacity, workers)
    if shed and load.batches and workers:
        tau += shed / load.batches / workers / u.capacity
    return tau


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
