"""The exhaustive optimum: the cheapest plan over all bushy join trees and join placements (no cross products).

Dynamic programming over subsets of the inputs. best[X, n] is the cheapest way to have the join of X computed at
node n; reach[X, n] adds the option of computing it elsewhere and shipping it to n. A join of X at n combines two
disjoint connected halves brought to n, so best[X, n] = min over splits X = Y ∪ Z of reach[Y, n] + reach[Z, n].
An n-way MJoin is priced as a chain of binary joins on one node (the same bytes cross the network), so this space
contains every plan Algorithm 1 can produce: its cost is a lower bound for the heuristic. Joins are placed only
on nodes that hold an input (or the destination): a join anywhere else ships every input and gains nothing.

Time and memory grow as 3^n and 2^n; `max_inputs` guards against accidental exponential runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, right_first

DEFAULT_MAX_INPUTS = 14


@dataclass(frozen=True)
class OptimalPlan:
    plan: Node
    cost: float


def optimal_plan(
    inputs: Sequence[Input | MJoin],
    model: RateModel,
    dest: str | None = None,
    max_inputs: int = DEFAULT_MAX_INPUTS,
) -> OptimalPlan:
    """The cheapest plan joining `inputs`, its result left where it ends (dest None) or delivered to `dest`."""
    n = len(inputs)
    if n == 0:
        raise ValueError("nothing to join")
    if n > max_inputs:
        raise ValueError(f"exhaustive search over {n} inputs refused (max_inputs={max_inputs})")
    sites = list(dict.fromkeys([u.site for u in inputs] + ([dest] if dest is not None else [])))
    site_of = {s: i for i, s in enumerate(sites)}
    full = (1 << n) - 1
    base = [u.mask for u in inputs]

    union = np.zeros(full + 1, dtype=object)
    traffic = np.zeros(full + 1)
    for m in range(1, full + 1):
        low = (m & -m).bit_length() - 1
        union[m] = union[m & (m - 1)] | base[low]
        traffic[m] = model.traffic(union[m])
    connected = _connected_sets(base, model)

    inf = np.inf
    best = np.full((full + 1, len(sites)), inf)
    reach = np.full((full + 1, len(sites)), inf)
    split = np.zeros((full + 1, len(sites)), dtype=np.int64)
    for i, u in enumerate(inputs):
        best[1 << i, site_of[u.site]] = 0.0
    for m in range(1, full + 1):
        if m & (m - 1) and connected[m]:
            ys = _proper_submasks_with_lowest(m)
            zs = m ^ ys
            ok = connected[ys] & connected[zs]
            ys, zs = ys[ok], zs[ok]
            if len(ys):
                totals = reach[ys] + reach[zs]
                k = np.argmin(totals, axis=0)
                best[m] = totals[k, np.arange(len(sites))]
                split[m] = ys[k]
        if connected[m]:
            reach[m] = np.minimum(best[m], best[m].min() + traffic[m])

    if dest is None:
        root_site = int(np.argmin(best[full]))
        cost = float(best[full, root_site])
    else:
        root_site = site_of[dest]
        cost = float(reach[full, root_site])
        if best[full, root_site] > reach[full, root_site]:
            root_site = int(np.argmin(best[full]))
    if not np.isfinite(cost):
        raise ValueError("the inputs are not connected by join predicates")
    plan = _build(full, root_site, inputs, sites, best, split, traffic)
    return OptimalPlan(_flatten(plan), cost)


def _connected_sets(base: list[int], model: RateModel) -> np.ndarray:
    """connected[m]: the inputs in m form a connected join graph."""
    n = len(base)
    adj = [sum(1 << j for j in range(n) if j != i and model.joinable(base[i], base[j])) for i in range(n)]
    out = np.zeros(1 << n, dtype=bool)
    for m in range(1, 1 << n):
        seen = m & -m
        frontier = seen
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            nxt = adj[low.bit_length() - 1] & m & ~seen
            seen |= nxt
            frontier |= nxt
        out[m] = seen == m
    return out


def _proper_submasks_with_lowest(m: int) -> np.ndarray:
    """Every Y ⊂ m containing m's lowest input, Y ≠ m (each unordered split once)."""
    pos = [p for p in range(m.bit_length()) if m >> p & 1]
    low, rest = 1 << pos[0], np.array([1 << p for p in pos[1:]], dtype=np.int64)
    t = np.arange((1 << len(rest)) - 1, dtype=np.int64)  # excludes "all of the rest", i.e. Y = m
    chosen = (t[:, None] >> np.arange(len(rest), dtype=np.int64)) & 1
    return low | (chosen @ rest if len(rest) else np.zeros(len(t), dtype=np.int64))


def _build(m: int, site: int, inputs, sites, best, split, traffic) -> Node:
    """The plan behind best[m, site]: each half is computed at `site` or computed elsewhere and shipped."""
    if m & (m - 1) == 0:
        return inputs[m.bit_length() - 1]
    y = int(split[m, site])
    parts = []
    for part in (y, m ^ y):
        elsewhere = int(np.argmin(best[part]))
        at = site if best[part, site] <= best[part, elsewhere] + traffic[part] else elsewhere
        parts.append(_build(part, at, inputs, sites, best, split, traffic))
    return MJoin(sites[site], tuple(parts))


def _flatten(node: Node) -> Node:
    """Merge chains of binary joins on one node into one MJoin (same bytes shipped), right input last."""
    if not isinstance(node, MJoin):
        return node
    out: list[Node] = []
    for child in node.inputs:
        child = _flatten(child)
        if isinstance(child, MJoin) and child.site == node.site:
            out.extend(child.inputs)
        else:
            out.append(child)
    return MJoin(node.site, right_first(node.site, out))
