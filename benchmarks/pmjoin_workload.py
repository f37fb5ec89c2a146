"""Synthetic planner inputs of the PMJoin paper's §4: value distributions, hot-spot layouts, rates and windows.

Distributions over 1..R (R = the data range): uniform; normal around a centre with a random standard deviation;
Zipf with θ in [0.1, 1.5]; self-similar with h in [0.1, 0.9] (the first h·R values get 1−h of the weight). Similar
distributions (SD) are Zipf with θ in [0.1, 0.3] sharing one hot spot; different distributions (DD) pick a family
at random and each stream has its own hot spot. A contiguous hot spot (CHS) keeps the heavy values next to each
other; a random hot spot (RHS) scatters them over the range by a permutation.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from windjoin.operators.pmjoin.model import EqualityClass, Query, Stream

Scenario = Literal["SD", "DD"]
Layout = Literal["CHS", "RHS"]


def shape(kind: str, r: int, rng: np.random.Generator, theta_range: tuple[float, float] = (0.1, 1.5)) -> np.ndarray:
    """A distribution over ranks 0..r-1, heaviest first for Zipf and self-similar, centred for normal."""
    x = np.arange(1, r + 1, dtype=float)
    if kind == "uniform":
        p = np.ones(r)
    elif kind == "normal":
        sigma = rng.uniform(0.02, 0.25) * r
        p = np.exp(-0.5 * ((x - (r + 1) / 2) / sigma) ** 2)
    elif kind == "zipf":
        p = x ** -rng.uniform(*theta_range)
    elif kind == "selfsimilar":
        h = rng.uniform(0.1, 0.9)
        a = np.log(1 - h) / np.log(h)
        cdf = (x / r) ** a
        p = np.diff(np.concatenate([[0.0], cdf]))
    else:
        raise ValueError(kind)
    p = np.maximum(p, 0)
    return p / p.sum()


def distributions(n: int, r: int, scenario: Scenario, layout: Layout, rng: np.random.Generator) -> np.ndarray:
    """n value distributions (rows) over r values."""
    shared_perm = rng.permutation(r)
    shared_offset = int(rng.integers(r))
    rows = []
    for _ in range(n):
        if scenario == "SD":
            p = shape("zipf", r, rng, (0.1, 0.3))
            perm, offset = shared_perm, shared_offset
        else:
            p = shape(str(rng.choice(["uniform", "normal", "zipf", "selfsimilar"])), r, rng)
            perm, offset = rng.permutation(r), int(rng.integers(r))
        rows.append(p[perm] if layout == "RHS" else np.roll(p, offset))
    return np.array(rows)


def query(
    rates: np.ndarray,
    window_seconds: np.ndarray,
    weights: np.ndarray,
    nodes: list[str] | None = None,
) -> Query:
    """A single-attribute equi-join of len(rates) streams with time windows, each on its own node by default."""
    n = len(rates)
    nodes = nodes or [f"n{i}" for i in range(n)]
    streams = tuple(Stream(f"S{i}", nodes[i], float(rates[i]), float(rates[i] * window_seconds[i])) for i in range(n))
    values = np.arange(1, weights.shape[1] + 1, dtype=np.int64)
    cls = EqualityClass("v", tuple(range(n)), ("v",) * n, values, weights)
    return Query(streams, tuple(dict.fromkeys(nodes)), (cls,))


def rates_and_windows(
    n: int, rng: np.random.Generator, order: Literal["LASW", "HASW", "random"] = "random"
) -> tuple[np.ndarray, np.ndarray]:
    """Rates in 10..1000 tuples/s, windows in 10..100 s; LASW pairs low rates with small windows, HASW the reverse."""
    rates = rng.uniform(10, 1000, n)
    windows = rng.uniform(10, 100, n)
    if order == "LASW":
        windows = np.sort(windows)[np.argsort(np.argsort(rates))]
    elif order == "HASW":
        windows = np.sort(windows)[::-1][np.argsort(np.argsort(rates))]
    return rates, windows
