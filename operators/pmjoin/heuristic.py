"""Algorithm 1 (STREAMJOINOPT): place the joins of one (sub)stream group greedily, in O(n²) cost evaluations.

Step 1 evaluates, per node, the local joins whose result is slower than both inputs: shipping the result later
can only be cheaper than shipping either input. Step 2 repeatedly takes the slowest stream (cheapest to ship) and
attaches the joinable stream with the smallest potential cost of eq. 4:

* case 1, ship the pending streams Σp to S_j's node: Σ λ_i·col(i, j) + λ(Σp ⋈ S_j) (the result may be shipped on);
* case 2, ship Σp and S_j to some third node: Σ λ_i + λ_j; the join stays pending until a case 1 places it.

Rates are weighted by tuple size throughout, so unequal sizes are priced as the paper suggests. Two situations the
paper's pseudocode leaves open are settled here: the inner loop after a merge does not skip the next stream, and a
join still pending when no stream is left runs on the node of one of its inputs that minimises the bytes shipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, right_first, union_mask


def stream_join_opt(inputs: Sequence[Input | MJoin], model: RateModel) -> Node:
    """The plan of Algorithm 1 for joining `inputs` (each at one node) under `model`."""
    if not inputs:
        raise ValueError("nothing to join")
    units = _local_joins(list(inputs), model)
    return _greedy_placement(units, model)


def _sort_key(model: RateModel):
    return lambda node: (model.traffic(node.mask), node.mask)


def _local_joins(units: list[Input | MJoin], model: RateModel) -> list[Input | MJoin]:
    """Step 1 (lines 2–9): per node, join co-located streams when the result is slower than both."""
    out: list[Input | MJoin] = []
    for site in dict.fromkeys(u.site for u in units):
        here = sorted((u for u in units if u.site == site), key=_sort_key(model))
        parts = [[u] for u in here]  # the inputs of the local MJoin growing at each position
        j = 0
        while j < len(parts):
            k = j + 1
            while k < len(parts):
                a, b = union_mask(parts[j]), union_mask(parts[k])
                slower = model.traffic(a | b) < min(model.traffic(a), model.traffic(b))
                if model.joinable(a, b) and slower:
                    parts[j] = parts[j] + parts[k]
                    del parts[k]
                else:
                    k += 1
            j += 1
        out.extend(p[0] if len(p) == 1 else MJoin(site, tuple(p)) for p in parts)
    return out


def _greedy_placement(units: list[Node], model: RateModel) -> Node:
    """Step 2 (lines 10–28): grow a pending set from the slowest stream until a case-1 join places it."""
    sigma = list(units)
    while len(sigma) > 1:
        slowest = min(sigma, key=_sort_key(model))
        sigma.remove(slowest)
        pending = [slowest]
        while True:
            choice = _cheapest_addition(pending, sigma, model)
            if choice is None:  # nothing joinable left: place the pending join on its best input's node
                sigma.append(_place_pending(pending, model))
                break
            stream, case1 = choice
            sigma.remove(stream)
            if case1:
                sigma.append(MJoin(stream.site, tuple(pending) + (stream,)))
                break
            pending.append(stream)
            if not sigma:
                sigma.append(_place_pending(pending, model))
                break
    return sigma[0]


def _cheapest_addition(pending: list[Node], sigma: list[Node], model: RateModel) -> tuple[Node, bool] | None:
    """Eq. 4 over every stream joinable with the pending set: the cheapest one, and whether case 1 wins for it."""
    pending_mask = 0
    for p in pending:
        pending_mask |= p.mask
    shipped_all = sum(model.traffic(p.mask) for p in pending)
    best: tuple[float, int, Node, bool] | None = None
    for order, s in enumerate(sorted(sigma, key=_sort_key(model))):
        if not model.joinable(pending_mask, s.mask):
            continue
        case2 = shipped_all + model.traffic(s.mask)
        moved = sum(model.traffic(p.mask) for p in pending if p.site != s.site)
        case1 = moved + model.traffic(pending_mask | s.mask)
        cost, is_case1 = (case1, True) if case1 <= case2 else (case2, False)
        if best is None or cost < best[0]:
            best = (cost, order, s, is_case1)
    return None if best is None else (best[2], best[3])


def _place_pending(pending: list[Node], model: RateModel) -> Node:
    """A pending MJoin with no stream left to attach runs where the fewest bytes must travel to it."""
    sites = list(dict.fromkeys(p.site for p in pending))

    def shipped(site: str) -> float:
        return sum(model.traffic(p.mask) for p in pending if p.site != site)

    site = min(sites, key=shipped)
    return MJoin(site, right_first(site, list(pending)))
