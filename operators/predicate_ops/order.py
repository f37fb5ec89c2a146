"""`lt`, `le`, `gt`, `ge`: one-sided orderings, served by a sorted search over an unbounded range."""

from __future__ import annotations

import numpy as np

from windjoin.operators.predicate_ops.base import ComparisonOp, IndexKind, PredicateOp, Width
from windjoin.operators.predicate_ops.registry import op_named, register


class _Ordering(ComparisonOp):
    """`stored OP probe`: matches are the stored values below (`below`) or above the probe's."""

    index = IndexKind.ORDERED
    orders = True
    below: bool
    mirror: str  # the op with the operands swapped

    def mirrored(self) -> PredicateOp:
        return op_named(self.mirror)

    def bounds(self, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
        inf = np.full_like(probe, np.inf)
        return (-inf, probe) if self.below else (probe, inf)


@register
class Lt(_Ordering):
    name, mirror, below, compare = "lt", "gt", True, np.less


@register
class Le(_Ordering):
    name, mirror, below, compare = "le", "ge", True, np.less_equal


@register
class Gt(_Ordering):
    name, mirror, below, compare = "gt", "lt", False, np.greater


@register
class Ge(_Ordering):
    name, mirror, below, compare = "ge", "le", False, np.greater_equal
