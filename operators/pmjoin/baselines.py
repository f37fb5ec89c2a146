"""The plans the paper compares against: Simple (everything to the fastest stream's node) and centralized plans.

Simple ships every other stream to the node of the stream with the highest rate and joins there in one MJoin;
its cost is the sum of the shipped streams and does not depend on selectivity (flat in Fig. 5). The best
centralized plan tries every node holding a stream and keeps the cheapest (Example 1's 100.1).
"""

from __future__ import annotations

from collections.abc import Sequence

from windjoin.operators.pmjoin.model import RateModel
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, plan_cost, right_first


def centralized_plan(inputs: Sequence[Input | MJoin], site: str) -> Node:
    """One MJoin at `site` joining every input (those elsewhere are shipped there)."""
    if len(inputs) == 1:
        return inputs[0]
    return MJoin(site, right_first(site, list(inputs)))


def simple_plan(inputs: Sequence[Input | MJoin], model: RateModel) -> Node:
    """Simple: centralize on the node of the fastest input (by bytes/s)."""
    fastest = max(inputs, key=lambda u: (model.traffic(u.mask), -u.mask))
    return centralized_plan(inputs, fastest.site)


def best_centralized_plan(inputs: Sequence[Input | MJoin], model: RateModel) -> Node:
    """The cheapest plan that joins everything on a single node."""
    sites = dict.fromkeys(u.site for u in inputs)
    return min((centralized_plan(inputs, s) for s in sites), key=lambda p: plan_cost(p, model))
