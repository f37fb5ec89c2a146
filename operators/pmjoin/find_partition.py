"""Algorithm 2 (FINDPARTITION): mark the MJoins of a plan that could run as PMJoins, merging same-attribute children.

An MJoin is *partitionable* on a class when every predicate linking two of its inputs belongs to that one
(histogram-backed) equality class. From the root down, an MJoin that is not its parent's right input and is
partitionable becomes a PMJoin candidate and absorbs every child MJoin partitionable on the same class (the
grandchildren become its inputs, and are examined in turn). The original children are kept, so that a candidate
the selection heuristic rejects can be restored to the MJoins it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, union_mask


@dataclass(eq=False)
class Op:
    """An MJoin of the plan being examined: its original inputs, and its inputs after merging (if a candidate)."""

    site: str
    original: list[Op | Input]
    is_right: bool
    parent: Op | None = None
    pmjoin_class: int | None = None
    inputs: list[Op | Input] = field(default_factory=list)
    absorbed: bool = False

    @property
    def mask(self) -> int:
        return union_mask(self.original)


def to_ops(node: Node, is_right: bool = False, parent: Op | None = None) -> Op | Input:
    """The mutable operator tree of an Algorithm 1 plan (MJoins and Inputs only)."""
    if isinstance(node, Input):
        return node
    if not isinstance(node, MJoin):
        raise TypeError("FINDPARTITION takes a plan of MJoins")
    op = Op(node.site, [], is_right, parent)
    last = len(node.inputs) - 1
    op.original = [to_ops(c, i == last and c.site == node.site, op) for i, c in enumerate(node.inputs)]
    op.inputs = list(op.original)
    return op


def partition_class(children: list[Op | Input], model: RateModel) -> int | None:
    """The single partitionable class of every predicate linking two of `children`, or None."""
    linking: set[int] = set()
    for i, a in enumerate(children):
        for b in children[i + 1 :]:
            linking.update(model.linking_classes(a.mask, b.mask))
    if len(linking) != 1:
        return None
    (c,) = linking
    return c if model.query.classes[c].partitionable else None


def find_partition(op: Op, model: RateModel) -> None:
    """Algorithm 2 from `op` down: mark candidates (pmjoin_class) and merge their same-class children."""
    c = None if op.is_right else partition_class(op.inputs, model)
    if c is not None:
        op.pmjoin_class = c
        merged = True
        while merged:
            merged = False
            for k, child in enumerate(op.inputs):
                if isinstance(child, Op) and partition_class(child.inputs, model) == c:
                    child.absorbed = True
                    op.inputs[k : k + 1] = child.inputs
                    merged = True
                    break
    for child in op.inputs:
        if isinstance(child, Op):
            child.parent = op
            find_partition(child, model)


def candidates(root: Op | Input) -> list[Op]:
    """Every PMJoin candidate below (and including) `root`, in the merged tree."""
    if isinstance(root, Input):
        return []
    out = [root] if root.pmjoin_class is not None else []
    for child in root.inputs:
        out.extend(candidates(child))
    return out
