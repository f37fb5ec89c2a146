"""PMJoin over one equality class: partition the inputs into substream groups and plan each group on its own.

Each group's plan comes from Algorithm 1 (or the exhaustive optimum when asked) under the model restricted to the
group's values. The unpartitioned plan, priced on the same group, is kept instead when it is cheaper: the heuristic
is not optimal, so without this a group could get a worse plan than the whole stream had, and the partitioned plan
could cost more than the unpartitioned one. Since every rate of the model is a sum over values, the unpartitioned
plan's cost is the sum of its costs on the groups, so with this rule partitioning never costs more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from windjoin.operators.pmjoin import partition as part
from windjoin.operators.pmjoin.heuristic import stream_join_opt
from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.optimal import optimal_plan
from windjoin.operators.pmjoin.plan import Group, Input, Node, PMJoin, plan_cost

Method = Literal["none", "value", "hash", "range", "rate"]


@dataclass(frozen=True)
class Partitioning:
    """How substreams are formed: the method, the number of partitions D (ignored by none/value), a k-means seed."""

    method: Method = "value"
    partitions: int = 1
    seed: int = 0
    group_planner: Literal["heuristic", "optimal"] = "heuristic"
    keep_cheaper_unpartitioned: bool = True


def partition_groups(inputs: Sequence[Node], class_index: int, model: RateModel, how: Partitioning) -> list[np.ndarray]:
    """The value-index groups of class `class_index` that form the substreams."""
    values = model.query.classes[class_index].values
    if how.method == "none" or how.partitions == 1 and how.method != "value":
        return part.single_group(values)
    if how.method == "value":
        return part.value_partition(values)
    if how.method == "hash":
        return part.hash_partition(values, how.partitions)
    if how.method == "range":
        return part.range_partition(values, how.partitions)
    rates = np.array([model.value_rates(u.mask, class_index) for u in inputs])
    return part.rate_partition(rates, how.partitions, how.seed)


def plan_pmjoin(
    inputs: Sequence[Node],
    class_index: int,
    model: RateModel,
    how: Partitioning,
    unpartitioned: Node | None = None,
    dest: str | None = None,
) -> PMJoin:
    """The PMJoin of `inputs` on class `class_index`; `unpartitioned` is a plan over the same `Input` leaves."""
    leaves = [Input(u.mask, u.site) for u in inputs]
    planner = _group_planner(how, dest)
    groups = []
    for values in partition_groups(inputs, class_index, model, how):
        sub = model.restricted(class_index, values)
        plan = planner(leaves, sub)
        fallback = False
        keep = unpartitioned is not None and how.keep_cheaper_unpartitioned
        if keep and plan_cost(unpartitioned, sub, dest) < plan_cost(plan, sub, dest):
            plan, fallback = unpartitioned, True
        groups.append(Group(values, plan, fallback))
    return PMJoin(class_index, tuple(inputs), tuple(groups))


def _group_planner(how: Partitioning, dest: str | None) -> Callable[[list[Input], RateModel], Node]:
    if how.group_planner == "optimal":
        return lambda leaves, sub: optimal_plan(leaves, sub, dest).plan
    return stream_join_opt
