"""Join predicates, turned around to the side being probed, with exact vectorised evaluation and index ranges."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.spec import PredicateSpec

# stored OP probe, given left OP right: swap the operands of an ordering when the probe is the left tuple.
_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class ProbePredicate:
    """`stored_field OP probe_field` as seen by a tuple probing the opposite window.

    Evaluation is exact and matches the spec's definition (`|left - right| <= width` for band, and so on);
    `value_range` gives a range of stored values that contains every match, for the ordered index.
    """

    op: str
    stored_field: str
    probe_field: str
    width: float | int | None

    @staticmethod
    def orient(pred: PredicateSpec, probe_stream: str) -> ProbePredicate:
        probe_is_left = pred.left_ref[0] == probe_stream
        probe_ref, stored_ref = (pred.left_ref, pred.right_ref) if probe_is_left else (pred.right_ref, pred.left_ref)
        op = _SWAPPED.get(pred.op, pred.op) if probe_is_left else pred.op
        return ProbePredicate(op, stored_ref[1], probe_ref[1], pred.width)

    def evaluate(
        self, stored: np.ndarray, probe: np.ndarray, out: np.ndarray | None = None, scratch: np.ndarray | None = None
    ) -> np.ndarray:
        """Elementwise truth of the predicate (broadcasting like numpy).

        `out` (bool) and `scratch` (the difference's dtype) let a hot loop reuse its buffers.
        """
        compare = _COMPARE.get(self.op)
        if compare is not None:
            return compare(stored, probe, out=out)
        diff = np.subtract(stored, probe, out=scratch)
        np.abs(diff, out=diff)
        return (np.less_equal if self.op == "band" else np.greater)(diff, self.width, out=out)

    def value_range(self, probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closed bounds [lo, hi] on the stored value holding every match (a superset: the filter is exact)."""
        p = probe.astype(np.float64)
        inf = np.full_like(p, np.inf)
        if self.op == "eq":
            lo, hi = p, p
        elif self.op == "band":
            lo, hi = p - self.width, p + self.width
        elif self.op in ("lt", "le"):
            lo, hi = -inf, p
        else:  # gt, ge
            lo, hi = p, inf
        # Widen by a few ulps so float rounding can only add candidates, never lose one (ints stay exact).
        slack = 4 * _EPS * (np.abs(p) + float(self.width or 0)) + 1e-300
        return lo - slack, hi + slack
