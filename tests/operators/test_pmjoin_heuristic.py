"""Algorithm 1 on the paper's Example 2, and the exhaustive optimum against an independent plan enumeration."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.operators.pmjoin_queries import single_attribute_queries
from windjoin.operators.pmjoin.heuristic import stream_join_opt
from windjoin.operators.pmjoin.model import EqualityClass, Query, RateModel, Stream
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.plan import Input, MJoin, plan_cost


def example2() -> tuple[Query, list[Input]]:
    """Table 2's rates and windows; Fig. 2(a) is not in the text, so its edges are chosen to match Table 2
    (S0–S1: λ 70, S2–S3: λ 15, S0–S2,3: λ 9) and the walk-through (S4 joins S0)."""
    rates, windows = [10, 35, 25, 30, 15], [100, 350, 250, 300, 150]
    nodes = ["n0", "n0", "n1", "n1", "n2"]
    streams = tuple(Stream(f"S{i}", n, r, w) for i, (n, r, w) in enumerate(zip(nodes, rates, windows, strict=True)))
    edges = [((0, 1), 0.01), ((2, 3), 0.001), ((0, 2), 0.004), ((0, 4), 0.01)]
    classes = tuple(EqualityClass(f"e{k}", m, ("x", "y"), selectivity=f) for k, (m, f) in enumerate(edges))
    query = Query(streams, ("n0", "n1", "n2"), classes, sized_results=False)  # Example 2 assumes equal sizes
    return query, [Input(1 << i, n) for i, n in enumerate(nodes)]


def test_example2_follows_the_walkthrough_of_algorithm_1():
    query, inputs = example2()
    model = RateModel(query)
    plan = stream_join_opt(inputs, model)
    s = {i: inputs[i] for i in range(5)}
    local = MJoin("n1", (s[2], s[3]))  # step 1: S2 ⋈ S3 is local (λ 15 < 25), S0 ⋈ S1 is not (λ 70)
    s023 = MJoin("n1", (s[0], local))  # case 1: S0 is sent to n1
    assert plan == MJoin("n0", (s023, s[4], s[1]))  # case 2 for S4 (pending), then both go to S1's node n0
    assert plan_cost(plan, model) == pytest.approx(10 + 9 + 15)
    assert optimal_plan(inputs, model).cost == pytest.approx(30)  # S2,3 and S4 to n0: the heuristic is not optimal


def all_plans(inputs: list[Input], sites: list[str]):
    """Every binary join tree over `inputs` with every placement of every join (for tiny inputs only)."""
    if len(inputs) == 1:
        yield inputs[0]
        return
    first, rest = inputs[0], inputs[1:]
    for k in range(len(rest)):
        for others in itertools.combinations(rest, k):
            left = [first, *others]
            right = [u for u in rest if u not in others]
            for a in all_plans(left, sites):
                for b in all_plans(right, sites):
                    for site in sites:
                        yield MJoin(site, (a, b))


def connected(plan, model) -> bool:
    if isinstance(plan, Input):
        return True
    a, b = plan.inputs
    return model.joinable(a.mask, b.mask) and connected(a, model) and connected(b, model)


@settings(max_examples=40, deadline=None)
@given(single_attribute_queries(max_streams=4, max_values=3))
def test_optimal_equals_the_cheapest_enumerated_plan_and_bounds_the_heuristic(query):
    model = RateModel(query)
    inputs = [Input(1 << i, s.node) for i, s in enumerate(query.streams)]
    sites = list(dict.fromkeys(s.node for s in query.streams))
    cheapest = min(plan_cost(p, model) for p in all_plans(inputs, sites) if connected(p, model))
    opt = optimal_plan(inputs, model)
    assert opt.cost == pytest.approx(cheapest, rel=1e-9, abs=1e-12)
    assert plan_cost(opt.plan, model) == pytest.approx(opt.cost, rel=1e-9, abs=1e-12)
    assert plan_cost(stream_join_opt(inputs, model), model) >= opt.cost * (1 - 1e-9) - 1e-12


@settings(max_examples=30, deadline=None)
@given(single_attribute_queries(max_streams=4, max_values=3), st.integers(0, 3))
def test_optimal_with_a_destination_equals_the_cheapest_enumerated_delivery(query, which):
    """A PMJoin feeding a parent MJoin must deliver its result to the parent's node: the DP prices that too."""
    model = RateModel(query)
    inputs = [Input(1 << i, s.node) for i, s in enumerate(query.streams)]
    sites = list(dict.fromkeys(s.node for s in query.streams))
    dest = sites[which % len(sites)]
    cheapest = min(plan_cost(p, model, dest) for p in all_plans(inputs, sites) if connected(p, model))
    opt = optimal_plan(inputs, model, dest)
    assert opt.cost == pytest.approx(cheapest, rel=1e-9, abs=1e-12)
    assert plan_cost(opt.plan, model, dest) == pytest.approx(opt.cost, rel=1e-9, abs=1e-12)
