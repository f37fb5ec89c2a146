"""How many slots (workers) to run: paper 000's supplier/consumer rule and S2J's utilisation thresholds.

Paper 000 grows the degree of declustering when N_sup > beta * N_con and shrinks it when no slot is a
supplier, keeping the system minimally overloaded. S2J compares the average utilisation tau with
0 < tau0 < tau* < tau1 <= tau2 <= 1: above tau2 for `sustain` epochs it adds workers, below tau0 for
`sustain` epochs it removes some, in both cases aiming at tau* (n' = ceil(n * tau / tau*)); between tau1 and
tau2 shedding (control.shedding) absorbs the transitory overload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from windjoin.operators.control.bounded import ceil_within
from windjoin.operators.control.config import DeclusteringConfig, UtilisationConfig
from windjoin.operators.control.reorganise import Classes, Move
from windjoin.operators.partitioning import Group


def declustering_step(classes: Classes, slots: int, config: DeclusteringConfig, quiet: int = 1) -> int:
    """Paper 000's next degree of declustering: +1, -1 or unchanged, within [min_slots, max_slots]. `quiet`:
    epochs in a row without a supplier, this one included; it shrinks once they reach `shrink_after_epochs`
    (paper 000 shrinks at the first: on a micro-batch job a slot that just got its first partitions is judged
    before they load it, and the count flaps)."""
    n_sup, n_con = len(classes.suppliers), len(classes.consumers)
    if n_sup > config.beta * n_con:
        wanted = slots + 1
    elif n_sup == 0 and quiet >= config.shrink_after_epochs:
        wanted = slots - 1
    else:
        wanted = slots
    return min(config.max_slots, max(config.min_slots, wanted))


@dataclass(frozen=True)
class UtilisationState:
    """Consecutive epochs in which the scaling rule's grow (`above`) and shrink (`below`) conditions held: S2J's
    tau over tau2 and under tau0, or, with paper 000's declustering (which grows at once), no supplier."""

    above: int = 0
    below: int = 0


@dataclass(frozen=True)
class UtilisationDecision:
    workers: int
    shedding: bool  # tau > tau1: the shed ratio is positive this epoch
    state: UtilisationState


def utilisation_step(
    tau: float, workers: int, state: UtilisationState, config: UtilisationConfig
) -> UtilisationDecision:
    """S2J's scaling: the worker count for the next epoch, whether to shed, and the updated counters."""
    above = state.above + 1 if tau > config.tau2 else 0
    below = state.below + 1 if tau < config.tau0 else 0
    target = workers
    if above >= config.sustain_epochs or below >= config.sustain_epochs:
        target = ceil_within(workers * tau / config.tau_star - 1e-9, 1, config.max_workers)
        above = below = 0  # the new count is judged afresh
    target = min(config.max_workers, max(config.min_workers, target))
    return UtilisationDecision(target, tau > config.tau1, UtilisationState(above, below))


def drain_moves(
    groups: Mapping[Group, int], weights: Mapping[Group, float], remove: int, targets: Iterable[int] | None = None
) -> list[Move]:
    """Moves emptying slot `remove` before it is released: its groups, heaviest first, each to the slot then
    lightest among the targets (default: the other slots holding groups; longest-processing-time-first)."""
    targets = set(groups.values()) if targets is None else set(targets)
    load: dict[int, float] = {s: 0.0 for s in targets if s != remove}
    if not load:
        raise ValueError(f"cannot drain slot {remove}: it is the only slot")
    for g, s in groups.items():
        if s in load:
            load[s] += weights.get(g, 0.0)
    moves = []
    leaving = sorted((g for g, s in groups.items() if s == remove), key=lambda g: (-weights.get(g, 0.0), g))
    for g in leaving:
        target = min(load, key=lambda s: (load[s], s))
        load[target] += weights.get(g, 0.0)
        moves.append(Move(g, remove, target))
    return moves
