"""One control epoch: from the epoch's load to the next control state (routing, slot count, shed ratio).

The epoch runs the policies of `control.policies.POLICIES` in order over a typed draft (`control.epoch_state`):
utilisation tau (over the tuples *offered* to the join: those it joined plus those the adapter shed, so an epoch
that shed is not mistaken for a light one) decides the shed ratio and whether the slot count changes (S2J's
thresholds, or paper 000's supplier/consumer rule); a shrinking epoch drains the released slots (the highest
numbered) onto the others instead of reorganising; otherwise suppliers yield groups to consumers. New slots
start empty and become consumers in the next epoch. Groups whose state is still travelling (`in_flight`,
cleared by the caller as the join job acknowledges installs) never move again before they land.

With `fine_tuning.enabled`, the epoch first re-cuts partitions into mini-groups by their reported window tuples
(paper 000's fine tuning, control.finetune): a new mini-group stays on its parent's slot, buddies merge only on
one slot, and the drain or reorganisation that follows moves mini-groups like partitions, weighing each by its
share of its partition's tuples. So a slot hot with one big partition gets units it can yield.

With `memory.enabled` (paper 004, control.memory), the epoch then plans memory adaptation from the reported
memory: pushes and clean-ups become the epoch's spill request, and a relocation is the epoch's only routing
change (no concurrent adaptations: the reorganisation waits for the next epoch). Partitions with generations on
disk, or in a request the job has not taken yet, are frozen: no reorganisation or drain moves them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.epoch_state import ControlState, EpochDraft, EpochSeen, Policy
from windjoin.operators.control.load import EpochLoad
from windjoin.operators.control.memory import MemoryView
from windjoin.operators.control.policies import POLICIES
from windjoin.operators.control.reorganise import Move
from windjoin.operators.partitioning import Group

K = TypeVar("K")  # a damped key: a unit (Group) or a slot (int)


@dataclass(frozen=True)
class Decision:
    state: ControlState
    tau: float
    moves: tuple[Move, ...]
    hot: tuple[int, ...]  # suppliers holding one group, or one too heavy for any slot: spread (control.hot)
    retuned: tuple[int, ...] = ()  # partitions re-cut into other mini-groups this epoch (fine tuning)
    held: tuple[Group, ...] = ()  # units moved lately that the damping kept where they are


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
    policies: Sequence[Policy] = POLICIES,
    fine_work: Mapping[int, np.ndarray] | None = None,
) -> Decision:
    """The next control state from this epoch's load; `shed`: records the adapter shed in the epoch's batches,
    `seconds`: the wall-clock span of those batches (for `utilisation.measure: rate`), `arrival_rate`: records
    per second appended to the input topics since the last epoch (for `arrivals`; without it, `rate` is used),
    `fine`: each partition's latest window tuples by mini bits (for `fine_tuning`; partitions missing keep
    their units; `fine_work`: their join work by mini bits, which weighs mini-groups where given, else their
    tuples do), `memory`: the slots' memory as reported (for `memory`; without it nothing is decided there),
    `policies`: the steps run in order (the product's list unless a caller composes another)."""
    seen = EpochSeen(
        state, load, frozenset(in_flight), shed, seconds, arrival_rate, fine or {}, memory, fine_work or {}
    )
    draft = EpochDraft.start(seen)
    for policy in policies:
        draft = policy(draft, seen, config)
    epoch, hold, units = state.epoch + 1, config.reorganisation.hold_epochs, draft.routing.groups()
    slots = [s for m in draft.moves for s in (m.source, m.target)]  # both ends of each move settle
    new_state = replace(
        state,
        epoch=state.epoch + 1,
        routing=draft.routing,
        slots=draft.slots,
        shed_ratio=draft.shed_ratio,
        sustained=draft.sustained,
        spill=draft.spill,
        forced_bytes=draft.forced_bytes,
        moved_at=last_moved(state.moved_at, (m.group for m in draft.moves), units.__contains__, epoch, hold),
        over_streak=dict(draft.over_streak),
        slot_moved_at=last_moved(state.slot_moved_at, slots, lambda s: s < draft.slots, epoch, hold),
    )
    return Decision(new_state, draft.tau, draft.moves, draft.hot, draft.retuned, tuple(sorted(draft.held)))


def last_moved(
    before: Mapping[K, int], moved: Iterable[K], kept: Callable[[K], bool], epoch: int, hold_epochs: int
) -> dict[K, int]:
    """The epoch each unit (or slot) last moved, for the damping: this epoch's `moved` added, those older than
    the hold and those `kept` refuses (units re-cut by fine tuning, slots released) left out."""
    out = {k: e for k, e in before.items() if kept(k) and epoch - e < hold_epochs}
    out.update({k: epoch for k in moved if kept(k)})
    return out
