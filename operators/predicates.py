"""Join predicates, turned around to the side being probed; what each op means lives in predicate_ops/."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.predicate_ops import PredicateOp, op_named, value_range
from windjoin.operators.spec import PredicateSpec


@dataclass(frozen=True)
class ProbePredicate:
    """`stored_field OP probe_field` as seen by a tuple probing the opposite window.

    Evaluation is exact and matches the spec's definition (`|left - right| <= width` for band, and so on);
    `value_range` gives a range of stored values that contains every match, for the ordered index.
    """

    op: PredicateOp
    stored_field: str
    probe_field: str
    width: float | int | None

    @staticmethod
    def orient(pred: PredicateSpec, probe_stream: str) -> ProbePredicate:
        probe_is_left = pred.left_ref[0] == probe_stream
        probe_ref, stored_ref = (pred.left_ref, pred.right_ref) if probe_is_left else (pred.right_ref, pred.left_ref)
        op = op_named(pred.op)
        return ProbePredicate(op.mirrored() if probe_is_left else op, stored_ref[1], probe_ref[1], pred.width)

    def evaluate(
        self, stored: np.ndarray, probe: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None
    ) -> np.ndarray:
        """Elementwise truth of the predicate (broadcasting like numpy).

        `out` (bool) and `scratch` (the difference's dtype) let a hot loop reuse its buffers.
        """
        return self.op.evaluate(stored, probe, self.width, out, scratch)

    def value_range(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closed bounds [lo, hi] on the stored value holding every match (a superset: the filter is exact)."""
        return value_range(self.op, probe, self.width)

    def selectivity(self, stored: np.ndarray) -> float:
        """Fraction of `stored` one probe is expected to match."""
        return self.op.selectivity(stored, self.width)
