"""Which field of each stream splits a spec's join exactly into independent joins by hash of its value.

Splitting by one field per stream is exact when every task's streams are linked by equating predicates (`eq`)
between those fields: all tuples of a result then hold equal values there, so they land in the same split. A
stream's declared `key` is its field (the spec already demands `eq` between keys); an unkeyed stream takes
a field it is equated on. A window kind that numbers every arrival (count) cannot be split.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from windjoin.operators.predicate_ops import op_named
from windjoin.operators.spec import JoinSpec, TaskSpec
from windjoin.operators.task_graph import components

MAX_CHOICES = 4096  # field assignments tried before giving up


@dataclass(frozen=True)
class CoPartition:
    """The field to hash, per joined stream (`fields`), or why none splits the join exactly (`reason`)."""

    fields: dict[str, str] | None
    reason: str = ""


def co_partition(spec: JoinSpec) -> CoPartition:
    """One field per joined stream that splits every task exactly, or the reason there is none."""
    if spec.window.splits:
        return CoPartition(None, spec.window.splits)
    typed = [t.name for t in spec.tasks if t.type != "inner"]
    if typed:  # exact, but their unpaired rows would come in another order than one join's
        return CoPartition(None, f"task(s) {typed} emit unpaired rows, which one join orders by the whole input")
    joined = list(dict.fromkeys(s for t in spec.tasks for s in t.join))
    candidates = {s: _candidates(spec, s) for s in joined}
    lacking = [s for s in joined if not candidates[s]]
    if lacking:
        return CoPartition(None, f"stream(s) {lacking} have no key and are equated (eq) on no field")
    choices = product(*(candidates[s] for s in joined))
    for n, choice in enumerate(choices):
        if n == MAX_CHOICES:
            break
        fields = dict(zip(joined, choice, strict=True))
        if all(_linked(task, fields) for task in spec.tasks):
            return CoPartition(fields)
    return CoPartition(None, "no field per stream is equated (eq) across the streams of every task")


def _candidates(spec: JoinSpec, stream: str) -> list[str]:
    """The stream's key, or the fields an equating predicate of any task compares, in the spec's order."""
    key = spec.streams[stream].key
    if key is not None:
        return [key]
    found = []
    for task in spec.tasks:
        for pred in task.on:
            if op_named(pred.op).equates:
                found += [f for s, f in (pred.left_ref, pred.right_ref) if s == stream]
    return list(dict.fromkeys(found))


def _linked(task: TaskSpec, fields: dict[str, str]) -> bool:
    """Whether equating predicates between the chosen fields connect all the task's streams."""
    links = [
        (pred.left_ref[0], pred.right_ref[0])
        for pred in task.on
        if op_named(pred.op).equates
        and fields.get(pred.left_ref[0]) == pred.left_ref[1]
        and fields.get(pred.right_ref[0]) == pred.right_ref[1]
    ]
    return len(components(task.join, links)) == 1
