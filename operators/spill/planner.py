"""Deciding memory adaptations from measures (paper 004): local disk pushes, relocations, lazy-disk, active-disk.

Pure functions from each slot's memory use, output count and group statistics to decisions; applying them
(writing files, handing state between slots) is someone else's job. The paper's two restrictions hold by
construction: a round decides at most one adaptation per slot (no concurrent adaptations: a slot that sends or
receives a relocation does not push to disk in the same round, and `busy` slots are left alone), and groups
with pushed generations are never chosen for relocation.

- Disk push (section 4.3): a slot whose used memory M_u exceeds theta_m * M_a pushes `push_fraction` of M_u,
  inactive groups first, then by productivity (`choose`).
- Relocation (section 5): when M_l / M_m < theta_d, move (M_m - M_l) / 2 worth of the sender's most productive
  (smallest P_s/P_o) groups to the least used slot, never more than that amount.
- Clean-up while memory allows (section 4.2): a slot under theta_m with no other adaptation this round cleans
  up its most productive pushed groups whose pushed bytes fit below `cleanup_below` of its budget.
- Lazy-disk (Fig. 18): relocation first; slots still overflowing and not part of it push to disk.
- Active-disk (Fig. 19): relocation first, sent by the most productive of the fullest slots (see `relocation`);
  when memory is balanced and the average output
  rate per group (results of the sampling interval / groups) of the best slot is over theta_f times the worst
  slot's, the worst slot is made to push its least productive groups, at most what the query is expected to
  need beyond the cluster's memory (M_q - M_c) over the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from windjoin.operators.spill.config import MemoryAdaptationConfig
from windjoin.operators.spill.stats import GroupStats, push_order, take_until


@dataclass(frozen=True)
class SlotMeasure:
    """One slot as the planner sees it: memory used, results of the last sampling interval, its groups."""

    slot: int
    used_bytes: int
    outputs: int
    groups: Mapping[int, GroupStats]

    @property
    def output_rate(self) -> float:
        """Results of the interval per partition group held."""
        return self.outputs / len(self.groups) if self.groups else 0.0


@dataclass(frozen=True)
class Push:
    """Push these groups of `slot` to disk; `forced` marks active-disk's pushes (counted against M_q - M_c)."""

    slot: int
    parts: tuple[int, ...]
    forced: bool = False


@dataclass(frozen=True)
class Move:
    """Hand these groups from `sender` to `receiver` (operators.control.job_epoch carries the state)."""

    sender: int
    receiver: int
    parts: tuple[int, ...]


@dataclass(frozen=True)
class Cleanup:
    """Merge these groups' generations now and keep the merged window in memory (memory allows it)."""

    slot: int
    parts: tuple[int, ...]


Decision = Push | Move | Cleanup


def disk_push(slot: SlotMeasure, config: MemoryAdaptationConfig, now_ts: int) -> Push | None:
    """The local disk adaptation of one slot, or None while it is within theta_m of its budget."""
    if slot.used_bytes <= config.theta_m * config.memory_bytes:
        return None
    return _push(slot, config, now_ts, config.push_fraction * slot.used_bytes)


def _push(slot: SlotMeasure, config: MemoryAdaptationConfig, now_ts: int, target: float, forced: bool = False):
    order = push_order(slot.groups, now_ts, config.theta_t_ms, config.choose)
    parts = take_until(order, {p: g.size_bytes for p, g in slot.groups.items()}, target)
    return Push(slot.slot, tuple(parts), forced) if parts else None


def cleanup_while_memory_allows(slot: SlotMeasure, config: MemoryAdaptationConfig) -> Cleanup | None:
    """Pushed groups to clean up now: most productive first, while the slot's memory plus what they read back
    stays below `cleanup_below` of the budget (never while the slot is over theta_m)."""
    if config.cleanup_below is None or slot.used_bytes > config.theta_m * config.memory_bytes:
        return None
    room = config.cleanup_below * config.memory_bytes - slot.used_bytes
    pushed = [p for p, g in slot.groups.items() if g.disk_generations]
    pushed.sort(key=lambda p: (slot.groups[p].productivity, p))
    chosen = []
    for part in pushed:
        need = slot.groups[part].pushed_bytes
        if need <= room:
            chosen.append(part)
            room -= need
    return Cleanup(slot.slot, tuple(chosen)) if chosen else None


def relocation(slots: Sequence[SlotMeasure], config: MemoryAdaptationConfig) -> Move | None:
    """Move (M_m - M_l)/2 of the most used slot's most productive unpushed groups to the least used slot.

    Under active-disk the sender is, among the slots as full as the most used one (within theta_d), the one
    with the highest output rate per group: the room its forced pushes made is for productive groups."""
    if len(slots) < 2:
        return None
    most = max(slots, key=lambda s: (s.used_bytes, -s.slot))
    receiver = min(slots, key=lambda s: (s.used_bytes, s.slot))
    if most.used_bytes == 0 or receiver.used_bytes / most.used_bytes >= config.theta_d:
        return None
    sender = most
    if config.policy == "active_disk":
        full = [s for s in slots if s.used_bytes >= config.theta_d * most.used_bytes and s is not receiver]
        sender = max(full, key=lambda s: (s.output_rate, s.used_bytes, -s.slot))
    amount = (sender.used_bytes - receiver.used_bytes) / 2
    movable = [p for p, g in sender.groups.items() if g.disk_generations == 0 and g.size_bytes > 0]
    movable.sort(key=lambda p: (sender.groups[p].productivity, -sender.groups[p].size_bytes, p))
    chosen, total = [], 0
    for part in movable:
        size = sender.groups[part].size_bytes
        if total + size <= amount:
            chosen.append(part)
            total += size
    return Move(sender.slot, receiver.slot, tuple(chosen)) if chosen else None


def plan(
    slots: Sequence[SlotMeasure],
    config: MemoryAdaptationConfig,
    now_ts: int,
    busy: frozenset[int] = frozenset(),
    query_bytes: int | None = None,
    forced_bytes: int = 0,
    relocate: bool = True,
) -> list[Decision]:
    """This round's adaptations under the configured policy; `busy` slots are mid-adaptation and left alone.

    Active-disk needs `query_bytes` (M_q, the query's expected memory need) to bound its forced pushes, and
    `forced_bytes` (what it already forced). `relocate=False` leaves only disk adaptation (a baseline)."""
    free = [s for s in slots if s.slot not in busy]
    decisions: list[Decision] = []
    involved: set[int] = set()
    move = relocation(free, config) if relocate else None
    if move is not None:
        decisions.append(move)
        involved |= {move.sender, move.receiver}
    elif config.policy == "active_disk":
        forced = _forced_push(free, config, now_ts, query_bytes, forced_bytes)
        if forced is not None:
            decisions.append(forced)
            involved.add(forced.slot)
    for slot in free:
        if slot.slot in involved:
            continue
        step = disk_push(slot, config, now_ts) or cleanup_while_memory_allows(slot, config)
        if step is not None:
            decisions.append(step)
    return decisions


def _forced_push(
    slots: Sequence[SlotMeasure],
    config: MemoryAdaptationConfig,
    now_ts: int,
    query_bytes: int | None,
    forced_bytes: int,
) -> Push | None:
    """Active-disk: memory is balanced; push from the slot with the lowest output rate per group if the best
    slot's rate is over theta_f times it, within the remaining M_q - M_c allowance."""
    if query_bytes is None or len(slots) < 2:
        return None
    allowance = query_bytes - config.memory_bytes * len(slots) - forced_bytes
    if allowance <= 0:
        return None
    if max(s.used_bytes for s in slots) < config.active_from * config.memory_bytes:
        return None
    worst = min(slots, key=lambda s: (s.output_rate, s.slot))
    best = max(s.output_rate for s in slots)
    ratio = math.inf if worst.output_rate == 0 else best / worst.output_rate
    if best == 0 or ratio <= config.theta_f:
        return None
    return _push(worst, config, now_ts, min(config.push_fraction * worst.used_bytes, allowance), forced=True)
