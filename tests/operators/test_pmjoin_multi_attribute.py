"""Algorithm 2 (FINDPARTITION) and the PMJoin selection heuristic on queries joining on several attributes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.operators.pmjoin_queries import multi_attribute_queries
from windjoin.operators.pmjoin.find_partition import candidates, find_partition, to_ops
from windjoin.operators.pmjoin.model import EqualityClass, Query, RateModel, Stream
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, PMJoin, leaves
from windjoin.operators.pmjoin.planner import PlannerOptions, plan_query
from windjoin.operators.pmjoin.pmjoin import Partitioning
from windjoin.operators.pmjoin.selection import select_pmjoins

HOT = 0.85


def two_attribute_query(s0_rate: float) -> Query:
    """S0.a = S1.a and S1.b = S2.b = S3.b, one stream per node, each stream hot on a different value."""
    rates = [s0_rate, 40.0, 60.0, 30.0]
    streams = tuple(Stream(f"S{i}", f"n{i}", r, r * 0.05) for i, r in enumerate(rates))
    cold = (1 - HOT) / 3

    def hot(k: int) -> list[float]:
        return [HOT if v == k else cold for v in range(4)]

    a = EqualityClass("a", (0, 1), ("a", "a"), np.arange(4), np.array([hot(0), hot(3)]))
    b = EqualityClass("b", (1, 2, 3), ("b", "b", "b"), np.arange(4), np.array([hot(0), hot(1), hot(2)]))
    return Query(streams, ("n0", "n1", "n2", "n3"), (a, b))


def test_findpartition_marks_the_root_on_a_and_its_child_on_b():
    query = two_attribute_query(50.0)
    report = plan_query(query, PlannerOptions(Partitioning("none"), 0))
    model = RateModel(query)
    root = to_ops(report.unpartitioned)
    find_partition(root, model)
    marked = {op.pmjoin_class: sorted(c.mask for c in op.inputs) for op in candidates(root)}
    assert marked == {0: [0b0001, 0b1110], 1: [0b0010, 0b0100, 0b1000]}  # b's two MJoins merged into one


def test_selection_prefers_the_pmjoin_with_faster_inputs_and_never_nests_pmjoins():
    # S0 at 50/s: the b-join's inputs (130/s) are faster, so it becomes the PMJoin and the root stays an MJoin.
    report = plan_query(two_attribute_query(50.0), PlannerOptions(Partitioning("value"), 0))
    assert isinstance(report.plan, MJoin)
    (pm,) = [c for c in report.plan.inputs if isinstance(c, PMJoin)]
    assert pm.class_index == 1 and pm.mask == 0b1110
    assert report.cost < report.unpartitioned_cost
    # S0 at 500/s: now the root (on a) has the faster inputs; the b-join is restored to MJoins below it.
    report = plan_query(two_attribute_query(500.0), PlannerOptions(Partitioning("value"), 0))
    assert isinstance(report.plan, PMJoin) and report.plan.class_index == 0
    assert not any(isinstance(c, PMJoin) for c in report.plan.inputs)
    assert report.cost <= report.unpartitioned_cost


def pmjoins(node: Node) -> list[PMJoin]:
    if isinstance(node, Input):
        return []
    own = [node] if isinstance(node, PMJoin) else []
    return own + [p for c in node.inputs for p in pmjoins(c)]


@settings(max_examples=60, deadline=None)
@given(
    multi_attribute_queries(),
    st.sampled_from(["value", "hash", "range", "rate"]),
    st.integers(1, 4),
    st.sampled_from(["heuristic", "optimal"]),
)
def test_multi_attribute_plans_are_complete_never_nest_pmjoins_and_never_cost_more(query, method, d, planner):
    report = plan_query(query, PlannerOptions(Partitioning(method, d, group_planner=planner), 0))
    assert sorted(leaf.mask for leaf in leaves(report.plan)) == [1 << i for i in range(len(query.streams))]
    for pm in pmjoins(report.plan):
        assert not any(isinstance(c, PMJoin) for c in pm.inputs)  # constraint 1
        for g in pm.groups:
            assert sorted(leaf.mask for leaf in leaves(g.plan)) == sorted(c.mask for c in pm.inputs)
    assert report.cost <= report.unpartitioned_cost * (1 + 1e-9) + 1e-12


@settings(max_examples=30, deadline=None)
@given(multi_attribute_queries())
def test_selection_keeps_no_two_adjacent_candidates(query):
    model = RateModel(query)
    base = plan_query(query, PlannerOptions(Partitioning("none"), 0)).unpartitioned
    root = to_ops(base)
    if isinstance(root, Input):
        return
    find_partition(root, model)
    chosen = select_pmjoins(candidates(root), model)
    ids = {id(op) for op in chosen}
    assert all(op.parent is None or id(op.parent) not in ids for op in chosen)
    assert not any(op.is_right for op in chosen)  # constraint 2: never a parent's right input
