"""Partitioning: every method covers the value domain once; partitioned plans never cost more than unpartitioned."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.operators.pmjoin_queries import single_attribute_queries
from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.partition import (
    hash_partition,
    range_partition,
    rank_vectors,
    rate_partition,
)
from windjoin.operators.pmjoin.plan import PMJoin, leaves, plan_cost
from windjoin.operators.pmjoin.planner import PlannerOptions, plan_query, source_inputs
from windjoin.operators.pmjoin.pmjoin import Partitioning, plan_pmjoin

METHODS = ["value", "hash", "range", "rate"]


def covers_once(groups: list[np.ndarray], n: int) -> bool:
    flat = np.sort(np.concatenate(groups))
    return np.array_equal(flat, np.arange(n)) and all(len(g) for g in groups)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(1, 12), st.integers(0, 3))
def test_every_method_splits_the_domain_into_at_most_d_nonempty_groups(n_values, d, seed):
    values = np.arange(5, 5 + n_values, dtype=np.int64)
    rates = np.random.default_rng(seed).integers(0, 4, size=(4, n_values)).astype(float)
    for groups in (hash_partition(values, d), range_partition(values, d), rate_partition(rates, d, seed)):
        assert covers_once(groups, n_values)
        assert len(groups) <= d
    assert len(range_partition(values, d)) == min(d, n_values)
    assert len(rate_partition(rates, d, seed)) == min(d, n_values)


def test_range_partition_is_contiguous_and_hash_is_stable_across_calls():
    values = np.arange(1, 101, dtype=np.int64)
    groups = range_partition(values, 4)
    assert [(values[g].min(), values[g].max()) for g in groups] == [(1, 25), (26, 50), (51, 75), (76, 100)]
    assert all(np.array_equal(a, b) for a, b in zip(hash_partition(values, 7), hash_partition(values, 7), strict=True))
    names = np.array(["a", "b", "c", "d"], dtype=object)
    assert covers_once(hash_partition(names, 2), 4)


def test_rank_vectors_follow_the_paper_and_tie_equal_rates():
    # Sorted list <FS3, FS1, FS2> gives V = <2, 3, 1> (§3.3).
    assert rank_vectors(np.array([[2.0], [3.0], [1.0]])).tolist() == [[2.0, 3.0, 1.0]]
    assert rank_vectors(np.array([[1.0], [1.0], [0.0]])).tolist() == [[2.5, 2.5, 1.0]]


def test_rate_partition_groups_values_with_the_same_ranking():
    # Values 0, 2, 4 are hot in stream 0; 1, 3, 5 in stream 1: two clusters.
    rates = np.array([[9, 1, 8, 2, 7, 1], [1, 9, 2, 8, 1, 7]], dtype=float)
    groups = rate_partition(rates, 2)
    assert sorted(g.tolist() for g in groups) == [[0, 2, 4], [1, 3, 5]]


@settings(max_examples=60, deadline=None)
@given(single_attribute_queries(), st.sampled_from(METHODS), st.integers(1, 6))
def test_partitioned_plan_never_costs_more_than_the_unpartitioned_one(query, method, d):
    report = plan_query(query, PlannerOptions(Partitioning(method, d), optimal_max_streams=6))
    assert report.cost <= report.unpartitioned_cost * (1 + 1e-9) + 1e-12
    assert report.optimal_cost is not None
    assert report.unpartitioned_cost >= report.optimal_cost * (1 - 1e-9) - 1e-12
    assert report.simple_cost >= report.centralized_cost * (1 - 1e-9)
    assert sorted(leaf.mask for leaf in leaves(report.plan)) == [1 << i for i in range(len(query.streams))]


@settings(max_examples=40, deadline=None)
@given(single_attribute_queries(max_streams=5), st.sampled_from(METHODS), st.integers(1, 6))
def test_optimal_group_plans_never_cost_more_than_the_optimal_unpartitioned_plan(query, method, d):
    """Without any guard: the model is linear over values, so per-group optima add up to at most the optimum."""
    model = RateModel(query)
    inputs = source_inputs(query)
    how = Partitioning(method, d, group_planner="optimal", keep_cheaper_unpartitioned=False)
    pm = plan_pmjoin(inputs, 0, model, how)
    assert plan_cost(pm, model) <= optimal_plan(inputs, model).cost * (1 + 1e-9) + 1e-12


@settings(max_examples=40, deadline=None)
@given(single_attribute_queries(), st.sampled_from(METHODS), st.integers(1, 6))
def test_a_plan_costs_the_sum_of_its_costs_on_the_groups(query, method, d):
    model = RateModel(query)
    inputs = source_inputs(query)
    plan = plan_query(query, PlannerOptions(Partitioning("none"), 0)).unpartitioned
    pm = plan_pmjoin(inputs, 0, model, Partitioning(method, d))
    total = sum(plan_cost(plan, model.restricted(0, g.values)) for g in pm.groups)
    assert total == pytest.approx(plan_cost(plan, model), rel=1e-9, abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(single_attribute_queries())
def test_a_single_attribute_query_becomes_one_pmjoin_over_the_source_streams(query):
    report = plan_query(query, PlannerOptions(Partitioning("value"), 0))
    assert isinstance(report.plan, PMJoin)
    assert len(report.plan.groups) == len(query.classes[0].values)
    assert sorted(leaf.mask for leaf in report.plan.inputs) == [1 << i for i in range(len(query.streams))]
