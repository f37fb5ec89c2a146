"""The PMJoin selection heuristic for multi-attribute queries, and the plan it yields.

Among the candidates of Algorithm 2, PMJoins with fast inputs are preferred (they have the most to save): take the
candidate with the largest total input rate, drop its parent candidate — and its child candidates — and repeat.
A PMJoin's output is spread over several nodes, so a PMJoin may not take another PMJoin's output as input
(constraint 1; the paper names only the parent, the children follow from the same constraint). Constraint 2 (no
PMJoin as a right input) is already enforced by Algorithm 2. Rejected candidates go back to their original MJoins.

A selected PMJoin that feeds an MJoin ships each group's result to that MJoin's node; the cost includes it.
"""

from __future__ import annotations

from windjoin.operators.pmjoin.find_partition import Op
from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.plan import Input, MJoin, Node
from windjoin.operators.pmjoin.pmjoin import Partitioning, plan_pmjoin


def select_pmjoins(found: list[Op], model: RateModel) -> list[Op]:
    """The heuristic: greedily by total input rate, never two adjacent PMJoins."""
    pending = sorted(found, key=lambda op: (-sum(model.rate(c.mask) for c in op.inputs), op.mask))
    chosen: list[Op] = []
    while pending:
        op = pending.pop(0)
        chosen.append(op)
        pending = [o for o in pending if o is not op.parent and o.parent is not op]
    return chosen


def build_plan(root: Op | Input, chosen: list[Op], model: RateModel, how: Partitioning) -> Node:
    """The final plan: chosen candidates as PMJoins, everything else as the original MJoins."""
    chosen_ids = {id(op) for op in chosen}
    return _build(root, chosen_ids, model, how, None)


def _build(node: Op | Input, chosen: set[int], model: RateModel, how: Partitioning, dest: str | None) -> Node:
    if isinstance(node, Input):
        return node
    if id(node) in chosen:
        inputs = [_build(child, chosen, model, how, _site(child)) for child in node.inputs]
        region = _region(node, {id(c) for c in node.inputs})
        return plan_pmjoin(inputs, node.pmjoin_class, model, how, unpartitioned=region, dest=dest)
    return MJoin(node.site, tuple(_build(child, chosen, model, how, node.site) for child in node.original))


def _site(node: Op | Input) -> str:
    return node.site


def _region(node: Op | Input, boundary: set[int]) -> Node:
    """The original MJoins of a PMJoin's merged region, its inputs replaced by Input leaves."""
    if id(node) in boundary or isinstance(node, Input):
        return Input(node.mask, node.site)
    return MJoin(node.site, tuple(_region(child, boundary) for child in node.original))
