"""The order in which an arriving tuple probes the other windows of an n-way join: fixed, or cheapest first.

The default is greedy by expected intermediate results: next comes the stream whose window is expected to
extend each partial combination by the fewest tuples (its size times the selectivity of the predicates that
connect it to the streams already joined), so a stream connected by nothing (a cross product) comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from weakref import WeakKeyDictionary

import numpy as np

from windjoin.operators.predicates import ProbePredicate
from windjoin.operators.spec import PredicateSpec, TaskSpec
from windjoin.operators.window import Block, WindowStore


def connecting(preds: Sequence[PredicateSpec], joined: Sequence[str], stream: str) -> tuple[ProbePredicate, ...]:
    """The predicates between `stream` and the streams joined so far, seen from the partial combination.

    `stream`'s field is the stored side; the probe side names its column `STREAM.FIELD`, since partial
    combinations carry several streams' columns side by side.
    """
    out = []
    for pred in preds:
        ends = (pred.left_ref[0], pred.right_ref[0])
        if stream not in ends:
            continue
        other = ends[1] if ends[0] == stream else ends[0]
        if other in joined:
            oriented = ProbePredicate.orient(pred, other)
            out.append(
                ProbePredicate(oriented.op, oriented.stored_field, f"{other}.{oriented.probe_field}", pred.width)
            )
    return tuple(out)


def check_fixed_orders(tasks: Sequence[TaskSpec], orders: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Fixed probe orders by task name, checked: each names a task and lists exactly that task's streams."""
    by_name = {t.name: t for t in tasks}
    checked = {}
    for name, order in orders.items():
        task = by_name.get(name)
        if task is None:
            raise ValueError(f"probe_order[{name!r}]: no such task (one of {list(by_name)})")
        if sorted(order) != sorted(task.join):
            raise ValueError(f"probe_order[{name!r}]: {list(order)} must list the task's streams {task.join} once each")
        checked[name] = tuple(order)
    return checked


class SelectivityOrder:
    """Greedy cheapest-first probe order from the windows' current contents (estimates cached per block)."""

    def __init__(self) -> None:
        self._cache: WeakKeyDictionary[Block, dict[tuple[object, ...], float]] = WeakKeyDictionary()

    def order(
        self, preds: Sequence[PredicateSpec], streams: Sequence[str], first: str, stores: Mapping[str, WindowStore]
    ) -> list[str]:
        """The streams other than `first`, in the order a tuple of `first` should probe them."""
        joined, remaining = [first], [s for s in streams if s != first]
        while remaining:
            costs = [self.fan_out(stores[s], connecting(preds, joined, s)) for s in remaining]
            best = remaining.pop(int(np.argmin(costs)))  # ties: the task's join order
            joined.append(best)
        return joined[1:]

    def fan_out(self, store: WindowStore, preds: Sequence[ProbePredicate]) -> float:
        """Expected stored tuples one partial combination matches: window size times the predicates' selectivity."""
        total = 0.0
        for block in store.blocks:
            sel = 1.0
            for pred in preds:
                sel *= self._selectivity(block, pred)
            total += len(block) * sel
        return total

    def _selectivity(self, block: Block, pred: ProbePredicate) -> float:
        per_block = self._cache.setdefault(block, {})
        key = (pred.op, pred.stored_field, pred.width)
        if key not in per_block:
            per_block[key] = pred.selectivity(block.column(pred.stored_field))
        return per_block[key]
