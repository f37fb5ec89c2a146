"""`band` and `outside`: numbers within (`|left - right| <= width`) or beyond a width of each other."""

from __future__ import annotations

import numpy as np

from windjoin.operators.predicate_ops.base import Buffer, IndexKind, PredicateOp, Width
from windjoin.operators.predicate_ops.registry import register


class _Distance(PredicateOp):
    """Compares `|stored - probe|` with the width, computed in the caller's scratch buffer when given."""

    takes_width = True
    numeric_only = True
    uses_scratch = True
    within: np.ufunc  # how the distance compares with the width

    def evaluate(self, stored: np.ndarray, probe: np.ndarray, width: Width, out: Buffer, scratch: Buffer) -> np.ndarray:
        diff = np.subtract(stored, probe, out=scratch)
        np.abs(diff, out=diff)
        return self.within(diff, width, out=out)


@register
class Band(_Distance):
    name, within = "band", np.less_equal
    index = IndexKind.ORDERED

    def bounds(self, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
        return probe - width, probe + width

    def bucket_width(self, width: Width) -> float:
        """Buckets of 2w: a range p ± w then spans at most two of them."""
        return 2.0 * float(width) if width else 1.0

    def selectivity(self, stored: np.ndarray, width: Width) -> float:
        """The band's share of the block's value range (uniform values assumed)."""
        if len(stored) == 0:
            return 1.0
        lo, hi = float(stored.min()), float(stored.max())
        unit = 1.0 if stored.dtype.kind in "iu" else 0.0
        return min(1.0, (2.0 * float(width) + unit) / (hi - lo + unit)) if hi > lo else 1.0


@register
class Outside(_Distance):
    name, within = "outside", np.greater
