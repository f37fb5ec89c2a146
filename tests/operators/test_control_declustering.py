"""Degree of declustering (paper 000) and S2J's utilisation thresholds with sustained triggers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.control.config import DeclusteringConfig, UtilisationConfig
from windjoin.operators.control.declustering import (
    UtilisationState,
    declustering_step,
    drain_moves,
    utilisation_step,
)
from windjoin.operators.control.reorganise import Classes
from windjoin.operators.partitioning import Group

CFG = DeclusteringConfig(beta=0.5, min_slots=2, max_slots=5)


def test_grow_when_suppliers_outnumber_beta_consumers():
    assert declustering_step(Classes((0, 1), (2, 3, 4), ()), 4, CFG) == 5  # 2 > 0.5 * 3
    assert declustering_step(Classes((0,), (2, 3), (1,)), 4, CFG) == 4  # 1 = 0.5 * 2: not greater
    assert declustering_step(Classes((0,), (), (1, 2)), 3, CFG) == 4  # any supplier and no consumer


def test_shrink_when_no_supplier():
    assert declustering_step(Classes((), (0,), (1, 2)), 3, CFG, quiet=3) == 2
    assert declustering_step(Classes((), (0, 1, 2), ()), 3, CFG, quiet=3) == 2
    # fewer supplier-free epochs in a row than shrink_after_epochs (3): the count holds
    assert declustering_step(Classes((), (0, 1, 2), ()), 3, CFG, quiet=2) == 3


def test_bounds():
    assert declustering_step(Classes((), (0, 1), ()), 2, CFG, quiet=3) == 2
    assert declustering_step(Classes((0, 1, 2, 3, 4), (), ()), 5, CFG) == 5


U = UtilisationConfig(tau0=0.2, tau_star=0.4, tau1=0.8, tau2=0.9, sustain_epochs=3, max_workers=100)


def run(taus, workers=4, config=U):
    state, out = UtilisationState(), []
    for tau in taus:
        decision = utilisation_step(tau, workers, state, config)
        out.append((decision.workers, decision.shedding))
        workers, state = decision.workers, decision.state
    return out


def test_allocate_only_after_a_sustained_overload():
    # 4 workers at tau 0.95 for three epochs; tau* = 0.4 wants ceil(4 * 0.95 / 0.4) = 10 workers
    assert run([0.95, 0.95, 0.95]) == [(4, True), (4, True), (10, True)]
    # a dip below tau2 restarts the count
    assert run([0.95, 0.95, 0.85, 0.95, 0.95]) == [(4, True)] * 5


def test_shed_between_tau1_and_tau2_without_scaling():
    assert run([0.85] * 10) == [(4, True)] * 10
    assert run([0.8]) == [(4, False)]  # tau1 itself does not shed


def test_deallocate_after_sustained_underload():
    # 10 workers at tau 0.1 for three epochs: ceil(10 * 0.1 / 0.4) = 3 workers
    assert run([0.1, 0.1, 0.1, 0.3], workers=10) == [(10, False), (10, False), (3, False), (3, False)]
    assert run([0.1, 0.2, 0.1], workers=10) == [(10, False)] * 3  # 0.2 is not below tau0


def test_worker_limits():
    cfg = UtilisationConfig(min_workers=2, max_workers=6, sustain_epochs=1)
    assert run([1.0], workers=4, config=cfg) == [(6, True)]
    assert run([0.01], workers=4, config=cfg) == [(2, False)]


@given(tau=st.floats(0.901, 5.0), workers=st.integers(1, 50))
def test_after_scaling_up_the_expected_utilisation_is_at_most_tau_star(tau, workers):
    cfg = UtilisationConfig(sustain_epochs=1, max_workers=10_000)
    new = utilisation_step(tau, workers, UtilisationState(), cfg).workers
    assert new > workers
    assert workers * tau / new <= cfg.tau_star + 1e-9  # the same load spread over the new count
    assert workers * tau / (new - 1) > cfg.tau_star - 1e-9  # and no more workers than needed


def test_drain_moves_empty_the_slot_onto_the_lightest():
    groups = {Group(0): 0, Group(1): 1, Group(2): 2, Group(3): 2, Group(4): 2, Group(5): 0}
    weights = {Group(0): 5.0, Group(1): 1.0, Group(2): 4.0, Group(3): 3.0, Group(4): 2.0, Group(5): 1.0}
    moves = drain_moves(groups, weights, remove=2)
    assert {m.group for m in moves} == {Group(2), Group(3), Group(4)}
    assert all(m.source == 2 and m.target != 2 for m in moves)
    # heaviest first onto the lightest: 4 -> slot 1 (1 -> 5), 3 -> slot 1 (5 -> 8), 2 -> slot 0 (6 -> 8)
    assert [(m.group, m.target) for m in moves] == [(Group(2), 1), (Group(3), 1), (Group(4), 0)]
    with pytest.raises(ValueError, match="only slot"):
        drain_moves({Group(0): 0}, {}, remove=0)
