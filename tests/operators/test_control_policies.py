"""A new controller policy is one function inserted into the epoch's list: a toy one here, touching nothing else."""

from __future__ import annotations

from dataclasses import replace

from tests.support.control_epoch import CONFIG, epoch_load
from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.epoch_state import EpochDraft, EpochSeen
from windjoin.operators.control.policies import POLICIES, reorganisation
from windjoin.operators.partitioning import Group


def pin(*groups: Group):
    """A toy policy: these groups stay where they are (say, an operator's maintenance pin)."""

    def pinned(draft: EpochDraft, seen: EpochSeen, config: ControlConfig) -> EpochDraft:
        return replace(draft, unmovable=draft.unmovable | set(groups))

    return pinned


def with_policy(policy, before):
    """The product's list with `policy` inserted before the step `before`."""
    at = POLICIES.index(before)
    return (*POLICIES[:at], policy, *POLICIES[at:])


def test_a_policy_inserted_before_reorganisation_steers_its_moves():
    state = ControlState.initial(partitions=8, slots=2)
    load = epoch_load(state, {0: 900, 1: 100}, {0: 0.95, 1: 0.1})  # slot 0 supplies, slot 1 consumes
    baseline = control_step(state, load, CONFIG)
    moved = {m.group for m in baseline.moves}
    assert moved and all(m.source == 0 for m in baseline.moves)

    decision = control_step(state, load, CONFIG, policies=with_policy(pin(*moved), before=reorganisation))
    assert decision.moves and not moved & {m.group for m in decision.moves}  # others go instead
    assert all(decision.state.routing.groups()[g] == 0 for g in moved)
    assert decision.state.slots == baseline.state.slots and decision.tau == baseline.tau  # the rest unchanged
