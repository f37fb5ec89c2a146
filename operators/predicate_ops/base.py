"""What a join predicate op is (`left OP right` in the spec): the interface every op class implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import Enum
from typing import ClassVar

import numpy as np

from windjoin.operators.predicate_ops.registry import REGISTRY

Width = float | int | None
Buffer = np.ndarray | None  # an output or scratch array a hot loop reuses, or None to allocate
NUMERIC_TYPES = ("int", "float")
_EPS = float(np.finfo(np.float64).eps)


class IndexKind(Enum):
    """Which index structure (operators/index.py) can find an op's matches among stored tuples."""

    HASH = "hash"  # matches have equal values: a hash lookup on any type (a point range on numbers)
    ORDERED = "ordered"  # matches lie in a range of stored values (`bounds`): a sorted search on numbers
    NONE = "none"  # no index narrows it: the nested loop checks every pair


class PredicateOp(ABC):
    """One predicate op: its meaning, the index that serves it, its selectivity and the fields it accepts.

    Methods see the predicate turned toward a probe, `stored OP probe` (`mirrored` turns it around), so the
    join code never asks which op it holds. Subclass it in a module of this package and decorate with
    `register`: that module is the whole change a new op needs.
    """

    name: ClassVar[str]  # the op's name in the spec
    index: ClassVar[IndexKind] = IndexKind.NONE
    takes_width: ClassVar[bool] = False  # the spec's `width` parameter is required (else refused)
    numeric_only: ClassVar[bool] = False  # compares numbers only (int, float)
    orders: ClassVar[bool] = False  # orders its operands, so bools are refused
    equates: ClassVar[bool] = False  # matched values are equal: streams keyed on its fields are co-partitioned
    uses_scratch: ClassVar[bool] = False  # evaluate wants a scratch buffer of the operands' result dtype

    def mirrored(self) -> PredicateOp:
        """The op with its operands swapped (`a OP b` iff `b OP' a`); a symmetric op is its own mirror."""
        return self

    @abstractmethod
    def evaluate(self, stored: np.ndarray, probe: np.ndarray, width: Width, out: Buffer, scratch: Buffer) -> np.ndarray:
        """Elementwise, exact truth of `stored OP probe` (broadcasting like numpy), into `out` if given."""

    def bounds(self, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
        """Closed bounds [lo, hi] (float64, may be infinite) on the stored values matching each probe value."""
        raise NotImplementedError(f"op {self.name!r} has index kind {self.index.value}; it gives no value range")

    def bucket_width(self, width: Width) -> float | None:
        """Bucket width that lets a hash table group an ordered op's bounded ranges (None: ranges unbounded)."""
        return None

    def selectivity(self, stored: np.ndarray, width: Width) -> float:
        """Fraction of `stored` one probe is expected to match (the cost models' estimate); a guess by default."""
        return 0.5

    def problem(self, types: Sequence[str], width: Width) -> tuple[str, str] | None:
        """Why this op cannot compare fields of these types (with this width): (key under the predicate, message)."""
        if self.takes_width != (width is not None):
            need = "needs" if self.takes_width else "does not take"
            widths = [n for n, op in REGISTRY.items() if op.takes_width]
            return "width", f"op {self.name!r} {need} a width (width is for ops {widths})"
        numeric = all(t in NUMERIC_TYPES for t in types)
        if self.numeric_only and not numeric:
            return "", f"op {self.name!r} compares numbers; got field types {list(types)} (accepted: int, float)"
        if not (numeric or types[0] == types[1]):
            return "", f"cannot compare field types {list(types)}; both numeric (int, float) or both the same type"
        if self.orders and "bool" in types:
            accepted = ", ".join(n for n, op in REGISTRY.items() if not (op.orders or op.numeric_only))
            return "", f"op {self.name!r} does not order bools (accepted ops for bool: {accepted})"
        return None


class ComparisonOp(PredicateOp):
    """An op that is one numpy comparison of the two values."""

    compare: ClassVar[np.ufunc]

    def evaluate(self, stored: np.ndarray, probe: np.ndarray, width: Width, out: Buffer, scratch: Buffer) -> np.ndarray:
        return self.compare(stored, probe, out=out)


def value_range(op: PredicateOp, probe: np.ndarray, width: Width) -> tuple[np.ndarray, np.ndarray]:
    """`op.bounds` widened by a few ulps, so float rounding can only add candidates, never lose one."""
    p = probe.astype(np.float64)
    lo, hi = op.bounds(p, width)
    slack = 4 * _EPS * (np.abs(p) + float(width or 0)) + 1e-300  # ints stay exact
    return lo - slack, hi + slack
