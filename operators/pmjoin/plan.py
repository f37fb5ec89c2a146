"""Plan trees and their communication cost: which MJoin runs where and which stream crosses the network.

A plan is a tree. A leaf (`Input`) is a stream available at one node: a source stream, or inside a PMJoin the
output of a sub-plan. An `MJoin` runs on one node and joins two or more inputs; inputs produced elsewhere are
shipped to its node (the input already there, if any, is its *right* input and is listed last). A `PMJoin` joins
its inputs once per substream group, each group with its own plan; a group's result stays where that plan ends
unless the PMJoin feeds a parent MJoin, which receives it.

Cost is the paper's unit-time communication cost: the bytes per second of every stream shipped between nodes,
rate × tuple size, with result tuples sized as the sum of their inputs. The final result is not shipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from windjoin.operators.pmjoin.model import RateModel


@dataclass(frozen=True)
class Input:
    """A stream available at `site`: a source stream, or (inside a PMJoin) the output of a sub-plan."""

    mask: int
    site: str


@dataclass(frozen=True)
class MJoin:
    """An n-way join at `site`; inputs from other nodes are shipped there."""

    site: str
    inputs: tuple[Node, ...]

    @property
    def mask(self) -> int:
        return union_mask(self.inputs)


@dataclass(frozen=True)
class Group:
    """One substream group of a PMJoin: the indices of its values (of the class) and the plan used for them."""

    values: np.ndarray
    plan: Node
    fallback: bool = False  # True when the unpartitioned plan was cheaper for this group than Algorithm 1's


@dataclass(frozen=True)
class PMJoin:
    """A partition-based multi-way join on equality class `class_index`, over `inputs`.

    The group plans have `Input` leaves standing for `inputs` (which are planned, and priced, once, outside).
    """

    class_index: int
    inputs: tuple[Node, ...]
    groups: tuple[Group, ...]

    @property
    def mask(self) -> int:
        return union_mask(self.inputs)

    @property
    def site(self) -> None:
        return None  # its output is spread over the groups' nodes


Node = Input | MJoin | PMJoin


class HasMask(Protocol):
    @property
    def mask(self) -> int: ...


def union_mask(inputs: Iterable[HasMask]) -> int:
    """The streams (bit mask) covered by any of `inputs`."""
    out = 0
    for child in inputs:
        out |= child.mask
    return out


def plan_cost(node: Node, model: RateModel, dest: str | None = None) -> float:
    """Bytes/s shipped by the plan, plus shipping its result to `dest` (None: the result stays where it is)."""
    if isinstance(node, Input):
        return model.traffic(node.mask) if dest is not None and node.site != dest else 0.0
    if isinstance(node, MJoin):
        own = sum(plan_cost(child, model, node.site) for child in node.inputs)
        return own + (model.traffic(node.mask) if dest is not None and node.site != dest else 0.0)
    inside = sum(plan_cost(child, model, _input_site(child)) for child in node.inputs)
    groups = sum(plan_cost(g.plan, model.restricted(node.class_index, g.values), dest) for g in node.groups)
    return inside + groups


def _input_site(node: Node) -> str | None:
    if isinstance(node, PMJoin):
        raise ValueError("a PMJoin cannot take another PMJoin's output as an input (constraint 1)")
    return node.site


def right_first(site: str, inputs: list[Node]) -> tuple[Node, ...]:
    """Order inputs so that one produced at `site` (the right input) comes last; otherwise keep the order."""
    local = [i for i, child in enumerate(inputs) if child.site == site]
    if not local:
        return tuple(inputs)
    k = local[-1]
    return tuple(inputs[:k] + inputs[k + 1 :] + [inputs[k]])


def leaves(node: Node) -> list[Input]:
    if isinstance(node, Input):
        return [node]
    out: list[Input] = []
    for child in node.inputs:
        out.extend(leaves(child))
    return out
