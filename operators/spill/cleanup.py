"""Exact clean-up: the results that mix generations of one partition group, each found once (paper 004, 4.2).

Generations G_1..G_k of a partition (pushed ones oldest first, the memory-resident one last) each produced their
own results during the normal run. The clean-up merges them one at a time: with base B = G_1 ∪ ... ∪ G_{t-1}
and delta D = G_t, the missing results of step t are the task's combinations over B ∪ D that use both a tuple of
B and a tuple of D (those within B were found by earlier steps or runs, those within D by G_t's run). For a task
over streams s_1..s_n, split them by the first position p > 1 where the side changes:

    for p = 2..n:   B(s_1..s_{p-1}) x D(s_p) x U(s_{p+1}..s_n)     (starts in B, first D at p)
                    D(s_1..s_{p-1}) x B(s_p) x U(s_{p+1}..s_n)     (starts in D, first B at p)

with U = B ∪ D. These 2(n-1) terms are disjoint and cover every mixed combination; with n = 3 and B, D read as
the paper's superscripts 1 and 2 they are its Equation (1) minus the all-delta part V_2, which is never computed
here. Base tuples further than the window size from the delta's time span are left out first (no result of
the step can hold them). Each term runs the real operator: the fixed sides are preloaded, the probing side s_p
is processed as one chunk (so it is the last arrival of every combination it forms) with lateness switched off.
The window test is the time window's (max ts - min ts <= size), which does not depend on arrival order, so the
order in which the clean-up feeds tuples changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from windjoin.operators.batch import Arrivals
from windjoin.operators.join import Pairs
from windjoin.operators.mjoin import Combinations, join_operator
from windjoin.operators.spec import JoinSpec, TaskSpec

Columns = dict[str, np.ndarray]
Generation = Mapping[str, Columns]  # stream -> columns of the generation's tuples
NO_LATENESS = 10**15  # the clean-up sees generations out of arrival order; nothing it is given is late


def concat_columns(pieces: Sequence[Mapping[str, np.ndarray]]) -> Columns:
    if len(pieces) == 1:
        return dict(pieces[0])
    return {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}


def union(gens: Sequence[Generation]) -> dict[str, Columns]:
    out: dict[str, Columns] = {}
    streams = {s for g in gens for s in g}
    for s in streams:
        pieces = [g[s] for g in gens if s in g and len(next(iter(g[s].values())))]
        if pieces:
            out[s] = concat_columns(pieces)
    return out


def near(spec: JoinSpec, gen: Generation, lo: int, hi: int) -> dict[str, Columns]:
    """The generation's tuples with event time in [lo, hi]."""
    out = {}
    for s, cols in gen.items():
        ts = np.asarray(cols[spec.streams[s].timestamp], dtype=np.int64)
        keep = (ts >= lo) & (ts <= hi)
        if keep.any():
            out[s] = {n: c[keep] for n, c in cols.items()}
    return out


def mixed_results(spec: JoinSpec, task: TaskSpec, base: Generation, delta: Generation) -> list[Pairs | Combinations]:
    """The task's results over base ∪ delta with at least one tuple of each (see the module docstring)."""
    both = union([base, delta])
    streams = task.join
    single = spec.model_copy(update={"tasks": [task], "allowed_lateness_ms": NO_LATENESS})
    out = []
    for p in range(1, len(streams)):
        for prefix, probe in ((base, delta), (delta, base)):
            sides = {**{s: prefix.get(s) for s in streams[:p]}, streams[p]: probe.get(streams[p])}
            sides.update({s: both.get(s) for s in streams[p + 1 :]})
            if any(cols is None or len(next(iter(cols.values()))) == 0 for cols in sides.values()):
                continue  # an empty side: the term has no combination
            join = join_operator(single)
            for s, cols in sides.items():
                if s != streams[p]:
                    join.preload(s, cols)
            probing = sides[streams[p]]
            n = len(next(iter(probing.values())))
            found = join.process({streams[p]: Arrivals(probing, np.arange(n))})
            out.extend(r for r in found.pairs if len(r))
    return out


def span(spec: JoinSpec, gen: Generation) -> tuple[int, int] | None:
    """The generation's smallest and largest event time (None when it holds nothing)."""
    times = [np.asarray(c[spec.streams[s].timestamp], dtype=np.int64) for s, c in gen.items()]
    times = [t for t in times if len(t)]
    return (min(int(t.min()) for t in times), max(int(t.max()) for t in times)) if times else None


def missing_results(spec: JoinSpec, gens: Sequence[Generation]) -> list[Pairs | Combinations]:
    """Every task's results over all generations that no single generation produced, each exactly once.

    Every result a merge step adds holds a delta tuple and lies within one window, so only base tuples within
    the window's reach (`JoinSpec.reach_ms`) of the delta's time span take part; generations are pushed in time
    order, so this keeps a step near the size of its delta instead of the whole history."""
    out = []
    spans = [span(spec, g) for g in gens]
    size = spec.reach_ms
    for t in range(1, len(gens)):
        if spans[t] is None:
            continue
        lo, hi = spans[t][0] - size, spans[t][1] + size
        base = union(
            [
                near(spec, g, lo, hi)
                for g, sp in zip(gens[:t], spans[:t], strict=True)
                if sp and sp[1] >= lo and sp[0] <= hi
            ]
        )
        for task in spec.tasks:
            out.extend(mixed_results(spec, task, base, gens[t]))
    return out
