"""Substream partitioning of one equality class's value domain: value, hash, range and rate-based (k-means).

Each function returns groups of value indices (into the class's sorted `values`); a group of values with each
stream's tuples carrying them is one substream group, planned on its own. Empty groups are dropped.

Rate-based partitioning follows §3.3: for every value (FStream group), rank the streams by their FStream rates
(1 = slowest, ties share the average rank); values whose rank vectors are close are likely to have similar optimal
plans, so k-means on the rank vectors forms the groups. When fewer distinct rank vectors than partitions exist,
the paper's k-means scattered coinciding vectors arbitrarily; here each distinct vector gets its own group and the
largest groups are halved (contiguously in value order) until there are D groups, which is deterministic.
"""

from __future__ import annotations

import zlib

import numpy as np

from windjoin.operators.pmjoin.kmeans import kmeans

METHODS = ("none", "value", "hash", "range", "rate")


def single_group(values: np.ndarray) -> list[np.ndarray]:
    return [np.arange(len(values))]


def value_partition(values: np.ndarray) -> list[np.ndarray]:
    """One group per distinct value (the finest partitioning: every FStream group alone)."""
    return [np.array([i]) for i in range(len(values))]


def stable_hash(values: np.ndarray) -> np.ndarray:
    """A hash that is the same on every run and machine (Python's str hash is salted per process)."""
    if np.issubdtype(values.dtype, np.integer):
        x = values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        return (x ^ (x >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9) >> np.uint64(32)
    return np.array([zlib.crc32(str(v).encode()) for v in values], dtype=np.uint64)


def hash_partition(values: np.ndarray, partitions: int) -> list[np.ndarray]:
    """Values to buckets by a hash: a random partition that ignores rates."""
    bucket = stable_hash(values) % np.uint64(partitions)
    return _nonempty([np.flatnonzero(bucket == b) for b in range(partitions)])


def range_partition(values: np.ndarray, partitions: int) -> list[np.ndarray]:
    """D sub-ranges: equal width over a numeric domain, equal counts over any other ordered domain."""
    if np.issubdtype(values.dtype, np.number) and len(values):
        edges = np.linspace(float(values.min()), float(values.max()) + 1, partitions + 1)
        bucket = np.clip(np.searchsorted(edges, values.astype(float), side="right") - 1, 0, partitions - 1)
        return _nonempty([np.flatnonzero(bucket == b) for b in range(partitions)])
    return _nonempty(np.array_split(np.arange(len(values)), partitions))


def rank_vectors(value_rates: np.ndarray) -> np.ndarray:
    """V[v, i]: the position (1-based) of stream i among the streams sorted by their rate for value v.

    `value_rates` is streams × values. Tied rates share their average position, so equal rates never look
    different (histogram buckets make ties common).
    """
    rates = value_rates.T  # values × streams
    n = rates.shape[1]
    order = np.argsort(rates, axis=1, kind="stable")
    srt = np.take_along_axis(rates, order, axis=1)
    pos = np.broadcast_to(np.arange(n), srt.shape)
    starts_run = np.ones(srt.shape, dtype=bool)
    starts_run[:, 1:] = srt[:, 1:] != srt[:, :-1]
    ends_run = np.ones(srt.shape, dtype=bool)
    ends_run[:, :-1] = starts_run[:, 1:]
    start = np.maximum.accumulate(np.where(starts_run, pos, 0), axis=1)
    end = np.minimum.accumulate(np.where(ends_run, pos, n)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty_like(rates, dtype=float)
    np.put_along_axis(ranks, order, (start + end) / 2 + 1, axis=1)
    return ranks


def rate_partition(value_rates: np.ndarray, partitions: int, seed: int = 0) -> list[np.ndarray]:
    """k-means over rank vectors of the FStream rates (streams × values)."""
    n_values = value_rates.shape[1]
    vectors = rank_vectors(value_rates)
    distinct, inverse, counts = np.unique(vectors, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if len(distinct) <= partitions:
        groups = [np.flatnonzero(inverse == j) for j in range(len(distinct))]
        return _split_largest(groups, min(partitions, n_values))
    labels = kmeans(distinct, counts, partitions, seed=seed)[inverse]
    return _nonempty([np.flatnonzero(labels == j) for j in range(partitions)])


def _split_largest(groups: list[np.ndarray], target: int) -> list[np.ndarray]:
    groups = list(groups)
    while len(groups) < target:
        k = max(range(len(groups)), key=lambda i: len(groups[i]))
        big = groups.pop(k)
        half = len(big) // 2
        groups.extend([big[:half], big[half:]])
    return sorted(groups, key=lambda g: g[0])


def _nonempty(groups: list[np.ndarray]) -> list[np.ndarray]:
    return [g for g in groups if len(g)]
