"""`eq` and `ne`: equal and unequal values, of any one type (or any two numbers)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from windjoin.operators.predicate_ops.base import ComparisonOp, IndexKind, Width
from windjoin.operators.predicate_ops.registry import register

SAMPLE_ROWS = 4096  # values sampled to count distinct keys


@register
class Eq(ComparisonOp):
    name, compare = "eq", np.equal
    index = IndexKind.HASH
    equates = True

    def bounds(self, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
        return probe, probe

    def selectivity(self, stored: np.ndarray, width: Width) -> float:
        """One over the distinct values in a sample of the block."""
        if len(stored) == 0:
            return 1.0
        sample = stored[:: max(1, len(stored) // SAMPLE_ROWS)]
        return 1.0 / max(1, len(pd.unique(sample)))


@register
class Ne(ComparisonOp):
    name, compare = "ne", np.not_equal
