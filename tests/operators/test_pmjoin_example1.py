"""The paper's Example 1 from Table 1's rates: centralized 100.1, distributed 54.03, PMJoin on a, b, c ≈ 0.07."""

from __future__ import annotations

import numpy as np
import pytest

from windjoin.operators.pmjoin.baselines import best_centralized_plan, simple_plan
from windjoin.operators.pmjoin.heuristic import stream_join_opt
from windjoin.operators.pmjoin.model import EqualityClass, Query, RateModel, Stream
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.plan import Input, MJoin, plan_cost

# Table 1: λ_i^a, λ_i^b, λ_i^c per stream; windows of 0.5 s.
TABLE1 = {"S1": (0.1, 0.1, 100.0), "S2": (0.03, 50.0, 0.04), "S3": (50.0, 0.01, 0.02)}


def example1() -> Query:
    streams, weights = [], []
    for i, (name, rates) in enumerate(TABLE1.items()):
        rate = sum(rates)
        streams.append(Stream(name, f"n{i + 1}", rate, rate * 0.5))
        weights.append(np.array(rates) / rate)
    dest = EqualityClass("dest", (0, 1, 2), ("dest",) * 3, np.array(["a", "b", "c"]), np.array(weights))
    return Query(tuple(streams), ("n1", "n2", "n3"), (dest,))


def inputs(query: Query) -> list[Input]:
    return [Input(1 << i, s.node) for i, s in enumerate(query.streams)]


def test_table1_rates_of_the_pairwise_results():
    model = RateModel(example1())
    assert model.rate(0b011) == pytest.approx(9.003)
    assert model.rate(0b101) == pytest.approx(7.001)
    assert model.rate(0b110) == pytest.approx(2.0008)


def test_best_centralized_plan_costs_100_1():
    model = RateModel(example1())
    plan = best_centralized_plan(inputs(example1()), model)
    assert plan_cost(plan, model) == pytest.approx(100.1)
    assert plan.site == "n1"
    assert plan_cost(simple_plan(inputs(example1()), model), model) == pytest.approx(100.1)


def test_best_distributed_plan_without_partitioning_costs_54_03():
    query = example1()
    model = RateModel(query)
    expected = 50.03 + 2 * 2.0008  # ship S3 to n2, then S2,3 (tuples of size 2) to n1
    opt = optimal_plan(inputs(query), model)
    assert opt.cost == pytest.approx(expected)
    heuristic = stream_join_opt(inputs(query), model)
    assert plan_cost(heuristic, model) == pytest.approx(expected)
    assert heuristic == MJoin("n1", (MJoin("n2", (Input(0b100, "n3"), Input(0b010, "n2"))), Input(0b001, "n1")))


@pytest.mark.parametrize(
    ("value", "cost"),
    [(0, 0.03 + 2 * 0.003), (1, 0.01 + 2 * 0.001), (2, 0.02 + 2 * 0.0008)],
)
def test_each_substream_gets_its_own_plan(value, cost):
    query = example1()
    model = RateModel(query).restricted(0, np.array([value]))
    assert plan_cost(stream_join_opt(inputs(query), model), model) == pytest.approx(cost)
    assert optimal_plan(inputs(query), model).cost == pytest.approx(cost)


def test_substream_a_is_shipped_s2_to_n1_then_to_n3():
    query = example1()
    model = RateModel(query).restricted(0, np.array([0]))
    plan = stream_join_opt(inputs(query), model)
    assert plan == MJoin("n3", (MJoin("n1", (Input(0b010, "n2"), Input(0b001, "n1"))), Input(0b100, "n3")))
    assert plan_cost(plan, model) == pytest.approx(0.036)
