"""The rate-based cost model of PMJoin (eqs. 2 and 3), evaluated for any set of streams.

Eq. 2 and 3 applied recursively, λ_ij = f·(λ_i·W_j + λ_j·W_i) and W_ij = f·W_i·W_j, have a closed form that does
not depend on the join order (the paper notes this): for a set X of streams,

    W_X = F_X · Π_{j∈X} W_j          λ_X = F_X · Σ_{i∈X} λ_i · Π_{j∈X, j≠i} W_j

where F_X is the probability that one tuple from each stream of X satisfies every predicate among them. The model
computes F_X per *equality class* (a set of stream attributes required to be equal), assuming independence
between classes:

* a class backed by value distributions p_k (histograms / FStream rates) contributes Σ_v Π_{k∈X} p_k(v) — this is
  eq. 2/3 applied per value (f = 1 within an FStream) and summed, which is exact for same-attribute chains such as
  Example 1, where multiplying pairwise selectivities would not be;
* a class given only an explicit selectivity f (two members) contributes f when both members are in X.

A *restricted* model keeps only a subset of one class's values: it prices a PMJoin substream group. Because every
quantity is a sum over values, the rates of the groups of a partition add up to the unpartitioned rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Stream:
    """A source stream: where it arrives, its rate λ (tuples/s), its expected window W (tuples), its tuple size."""

    name: str
    node: str
    rate: float
    window: float
    size: float = 1.0


@dataclass(frozen=True)
class EqualityClass:
    """Stream attributes that a query requires to be equal (one join attribute in the paper's sense).

    `weights[r]` is the value distribution of `members[r]` over `values` (rows sum to 1); without weights the class
    is priced by `selectivity` alone and cannot be partitioned.
    """

    name: str
    members: tuple[int, ...]
    attributes: tuple[str, ...]
    values: np.ndarray | None = None
    weights: np.ndarray | None = None
    selectivity: float | None = None

    @property
    def partitionable(self) -> bool:
        return self.weights is not None

    @property
    def member_mask(self) -> int:
        return sum(1 << m for m in self.members)


@dataclass(frozen=True)
class Query:
    """A multi-way window join: its streams, the processing nodes and the equality classes joining the streams."""

    streams: tuple[Stream, ...]
    nodes: tuple[str, ...]
    classes: tuple[EqualityClass, ...]
    sized_results: bool = True  # result tuple = sum of its inputs' sizes (False: as large as its largest input)

    @property
    def full_mask(self) -> int:
        return (1 << len(self.streams)) - 1


def bits(mask: int) -> list[int]:
    """The positions of the set bits of `mask`, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@dataclass
class RateModel:
    """Rates, windows and sizes of (composite) streams, identified by bitmasks over the query's streams."""

    query: Query
    restriction: tuple[int, np.ndarray] | None = None  # (class index, value indices kept)
    _factor: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    _stats: dict[int, tuple[float, float]] = field(default_factory=dict, repr=False)

    def restricted(self, class_index: int, value_indices: np.ndarray) -> RateModel:
        """The model of one substream group: class `class_index` keeps only the values at `value_indices`."""
        if not self.query.classes[class_index].partitionable:
            raise ValueError(f"class {self.query.classes[class_index].name} has no value distributions")
        return RateModel(self.query, (class_index, np.asarray(value_indices, dtype=np.intp)))

    def class_factor(self, c: int, mask: int) -> float:
        """Class c's share of F_X: the probability that X's members of c agree (restricted to the kept values)."""
        cls = self.query.classes[c]
        inside = mask & cls.member_mask
        key = (c, inside)
        if key in self._factor:
            return self._factor[key]
        restricted = self.restriction is not None and self.restriction[0] == c
        rows = [cls.members.index(b) for b in bits(inside)]
        if cls.weights is None:
            value = cls.selectivity if len(rows) >= 2 else 1.0
        elif not rows or (len(rows) == 1 and not restricted):
            value = 1.0
        else:
            w = cls.weights[:, self.restriction[1]] if restricted else cls.weights
            value = float(np.prod(w[rows], axis=0).sum())
        self._factor[key] = value
        return value

    def selectivity(self, mask: int) -> float:
        """F_X: the probability that one tuple from each stream in X joins (all predicates among X hold)."""
        f = 1.0
        for c in range(len(self.query.classes)):
            f *= self.class_factor(c, mask)
        return f

    def stats(self, mask: int) -> tuple[float, float]:
        """(λ_X, W_X) of the join result of the streams in `mask`, by the closed form of eqs. 2 and 3."""
        if mask in self._stats:
            return self._stats[mask]
        prod_w, sum_term = 1.0, 0.0  # Π W_j and Σ_i λ_i Π_{j≠i} W_j, built one stream at a time
        for b in bits(mask):
            s = self.query.streams[b]
            sum_term = sum_term * s.window + s.rate * prod_w
            prod_w *= s.window
        f = self.selectivity(mask)
        out = (f * sum_term, f * prod_w)
        self._stats[mask] = out
        return out

    def rate(self, mask: int) -> float:
        return self.stats(mask)[0]

    def window(self, mask: int) -> float:
        return self.stats(mask)[1]

    def size(self, mask: int) -> float:
        """Bytes per result tuple: the sum of its inputs' tuple sizes (or their maximum, if results are not sized)."""
        sizes = [self.query.streams[b].size for b in bits(mask)]
        return sum(sizes) if self.query.sized_results else max(sizes)

    def traffic(self, mask: int) -> float:
        """Bytes/s if this (composite) stream is shipped to another node."""
        return self.rate(mask) * self.size(mask)

    def joinable(self, a: int, b: int) -> bool:
        """Whether some predicate links a stream of `a` with a stream of `b`."""
        return any(cls.member_mask & a and cls.member_mask & b for cls in self.query.classes)

    def linking_classes(self, a: int, b: int) -> list[int]:
        return [c for c, cls in enumerate(self.query.classes) if cls.member_mask & a and cls.member_mask & b]

    def value_rates(self, mask: int, c: int) -> np.ndarray:
        """λ_X per value of class c: the FStream rates of a (possibly composite) stream X; use an unrestricted model."""
        cls = self.query.classes[c]
        rows = [cls.members.index(b) for b in bits(mask & cls.member_mask)]
        if cls.weights is None or not rows:
            raise ValueError(f"stream set {mask:#b} has no value distribution on class {cls.name}")
        other = 1.0
        for d in range(len(self.query.classes)):
            if d != c:
                other *= self.class_factor(d, mask)
        prod_w, sum_term = 1.0, 0.0
        for b in bits(mask):
            s = self.query.streams[b]
            sum_term = sum_term * s.window + s.rate * prod_w
            prod_w *= s.window
        return other * sum_term * np.prod(cls.weights[rows], axis=0)
