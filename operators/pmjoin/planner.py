"""The planner's entry point: Algorithm 1, then Algorithm 2 and the selection heuristic, with baselines to compare.

`plan_query` returns the chosen plan and, priced by the same model, the plans it should beat: Simple, the best
centralized plan, Algorithm 1 without partitioning and (for small queries) the exhaustive optimum without
partitioning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from windjoin.operators.pmjoin.baselines import best_centralized_plan, simple_plan
from windjoin.operators.pmjoin.find_partition import candidates, find_partition, to_ops
from windjoin.operators.pmjoin.heuristic import stream_join_opt
from windjoin.operators.pmjoin.model import Query, RateModel
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.plan import Input, Node, plan_cost
from windjoin.operators.pmjoin.pmjoin import Partitioning
from windjoin.operators.pmjoin.selection import build_plan, select_pmjoins


@dataclass(frozen=True)
class PlannerOptions:
    partitioning: Partitioning = field(default_factory=Partitioning)
    optimal_max_streams: int = 10  # the exhaustive reference is computed up to this many streams


@dataclass(frozen=True)
class PlanReport:
    plan: Node
    cost: float
    unpartitioned: Node
    unpartitioned_cost: float
    simple: Node
    simple_cost: float
    centralized: Node
    centralized_cost: float
    optimal: Node | None
    optimal_cost: float | None


def source_inputs(query: Query) -> list[Input]:
    return [Input(1 << i, s.node) for i, s in enumerate(query.streams)]


def partitioned_plan(query: Query, base: Node, model: RateModel, how: Partitioning) -> Node:
    """Algorithm 2 and the selection heuristic applied to Algorithm 1's plan `base`."""
    if how.method == "none":
        return base
    root = to_ops(base)
    if isinstance(root, Input):
        return base
    find_partition(root, model)
    return build_plan(root, select_pmjoins(candidates(root), model), model, how)


def plan_query(query: Query, options: PlannerOptions | None = None) -> PlanReport:
    options = options or PlannerOptions()
    model = RateModel(query)
    inputs = source_inputs(query)
    base = stream_join_opt(inputs, model)
    plan = partitioned_plan(query, base, model, options.partitioning)
    simple = simple_plan(inputs, model)
    central = best_centralized_plan(inputs, model)
    optimal = optimal_plan(inputs, model) if len(inputs) <= options.optimal_max_streams else None
    return PlanReport(
        plan=plan,
        cost=plan_cost(plan, model),
        unpartitioned=base,
        unpartitioned_cost=plan_cost(base, model),
        simple=simple,
        simple_cost=plan_cost(simple, model),
        centralized=central,
        centralized_cost=plan_cost(central, model),
        optimal=optimal.plan if optimal else None,
        optimal_cost=optimal.cost if optimal else None,
    )
