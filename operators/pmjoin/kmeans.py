"""Weighted k-means (Lloyd's iterations from a k-means++ start), small and deterministic for a given seed.

Rate-based partitioning clusters rank vectors, many of which coincide; clustering the distinct vectors weighted
by how often they occur gives the same clusters as clustering every vector, at a fraction of the cost.
"""

from __future__ import annotations

import numpy as np


def kmeans(points: np.ndarray, weights: np.ndarray, k: int, seed: int = 0, iterations: int = 100) -> np.ndarray:
    """Cluster labels (0..k-1) for each row of `points`; requires k ≤ number of rows."""
    n = len(points)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}, got {k}")
    rng = np.random.default_rng(seed)
    w = np.asarray(weights, dtype=float)
    centers = [points[rng.choice(n, p=w / w.sum())]]
    dist = ((points - centers[0]) ** 2).sum(axis=1)
    for _ in range(1, k):  # k-means++: far points are likelier seeds
        p = w * dist
        pick = rng.choice(n, p=p / p.sum()) if p.sum() > 0 else int(np.argmax(dist == dist.max()))
        centers.append(points[pick])
        dist = np.minimum(dist, ((points - points[pick]) ** 2).sum(axis=1))
    c = np.array(centers, dtype=float)
    labels = np.full(n, -1)
    for _ in range(iterations):
        d = ((points[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
        new = np.argmin(d, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            mine = labels == j
            if mine.any():
                c[j] = np.average(points[mine], axis=0, weights=w[mine])
    return labels
