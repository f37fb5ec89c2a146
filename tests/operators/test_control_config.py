"""Controller configuration: validation names the key and what is accepted; S2J's initial worker count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from windjoin.operators.control.config import ControlConfigError, initial_workers, parse_control_config


def test_defaults_are_valid():
    cfg = parse_control_config(None)
    u = cfg.utilisation
    assert 0 < u.tau0 < u.tau_star < u.tau1 <= u.tau2 <= 1
    assert 0 <= cfg.reorganisation.th_con < cfg.reorganisation.th_sup < 1


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"utilisation": {"tau0": 0.5}}, ["utilisation.tau0", "0 < tau0 < tau_star < tau1 <= tau2 <= 1", "0.5"]),
        ({"utilisation": {"tau1": 0.95, "tau2": 0.9}}, ["tau1=0.95", "tau2=0.9"]),
        ({"reorganisation": {"th_con": 0.9, "th_sup": 0.8}}, ["reorganisation.th_sup", "th_con < th_sup"]),
        ({"reorganisation": {"th_sup": 2}}, ["reorganisation.th_sup", "less than or equal to 1", "got 2"]),
        ({"shedding": {"model": "cubic"}}, ["shedding.model", "'linear' or 'quadratic'", "'cubic'"]),
        ({"shedding": {"bse": 0.1}}, ["shedding.bse", "accepted keys: ['base', 'model']"]),
        ({"declustering": {"beta": 1}}, ["declustering.beta", "less than 1"]),
        ({"declustering": {"min_slots": 5, "max_slots": 2}}, ["declustering.min_slots", "max_slots=2"]),
        ({"reorganisation": {"occupancy": "backlog"}}, ["reorganisation.backlog_capacity", "required"]),
        (
            {"reorganisation": {"occupancy": "queue"}},
            ["reorganisation.occupancy", "'busy', 'backlog', 'share', 'cpu' or 'tuples'"],
        ),
        ({"sheding": {}}, ["sheding", "accepted keys", "'shedding'"]),
        ({"fine_tuning": {"max_depth": 5}}, ["fine_tuning.max_depth", "less than or equal to 4", "got 5"]),
        ({"fine_tuning": {"max_depth": 0}}, ["fine_tuning.max_depth", "greater than or equal to 1"]),
        ({"fine_tuning": {"theta": 0}}, ["fine_tuning.theta", "greater than 0", "got 0"]),
        ({"fine_tuning": {"theta": 1.5}}, ["fine_tuning.theta", "integer", "got 1.5"]),
        ({"fine_tuning": {"enabled": "maybe"}}, ["fine_tuning.enabled", "accepted: true or false"]),
        ({"fine_tuning": {"enable": True}}, ["fine_tuning.enable", "accepted keys: ['enabled', 'max_depth', 'theta']"]),
        # text for a ratio: pydantic's lax float() read "0.2_5" as 0.25
        ({"shedding": {"base": "0.2_5"}}, ["shedding.base", "'0.2_5'", "accepted: a number written without quotes"]),
        ({"reorganisation": {"th_con": "nan"}}, ["reorganisation.th_con", "'nan'", "without quotes"]),
    ],
)
def test_errors_name_key_and_accepted_values(data, expected):
    with pytest.raises(ControlConfigError) as err:
        parse_control_config(data)
    for fragment in expected:
        assert fragment in str(err.value)


def test_every_problem_reported_at_once():
    with pytest.raises(ControlConfigError) as err:
        parse_control_config({"shedding": {"base": 2}, "fine_tuning": {"theta": -1}})
    assert "shedding.base" in str(err.value) and "fine_tuning.theta" in str(err.value)


def test_not_a_mapping():
    with pytest.raises(ControlConfigError, match="mapping of sections"):
        parse_control_config([1, 2])


def test_initial_workers_by_hand():
    # S2J: m = ceil(E(rate) * window / (W * tau*)): 1000 tuples/s over a 60 s window is 60k tuples in the window;
    # a worker holds W = 50k at tau* = 0.4, i.e. 20k each: exactly 3 workers, one tuple/s more needs a 4th.
    assert initial_workers(1000, 60, 50_000, 0.4) == 3
    assert initial_workers(1001, 60, 50_000, 0.4) == 4
    assert initial_workers(0, 60, 50_000, 0.4) == 1
    with pytest.raises(ValueError, match="tau_star"):
        initial_workers(1000, 60, 50_000, 0)


@given(
    rate=st.integers(0, 10**6),
    window=st.integers(1, 3600),
    capacity=st.integers(1, 10**7),
    tau_star=st.sampled_from([0.1, 0.25, 0.4, 0.5, 0.75, 1.0]),
)
def test_initial_workers_is_the_fewest_that_keep_tau_at_most_tau_star(rate, window, capacity, tau_star):
    m = initial_workers(rate, window, capacity, tau_star)
    per_worker = rate * window / m
    assert per_worker <= capacity * tau_star * (1 + 1e-9)
    if m > 1:  # one worker fewer would exceed tau*
        assert rate * window / (m - 1) > capacity * tau_star * (1 - 1e-9)
