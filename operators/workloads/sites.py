"""Events that follow a STATS file: the workload whose communication cost the planner predicted.

Each stream is a Poisson process of its STATS rate over `span_s` seconds of event time; each compared attribute
takes a value drawn independently from that stream's value distribution of its equality class (its substream
rates or histogram, normalised). A stream with substream rates per value is then exactly the sum of one Poisson
process per value at that value's rate — the FStreams of the paper. A class priced by an explicit selectivity f
draws both members uniformly from round(1/f) integers, so two tuples agree with probability f.

Timestamps are integer milliseconds from `start_ms`; every stream's events come out in timestamp order, with ids
0, 1, 2, ... in that order. Pure: the same query, span and seed give the same events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from windjoin.operators.pmjoin.model import Query


@dataclass(frozen=True)
class StreamEvents:
    """One stream's events as columns: ts (ms), id, and one column per compared attribute."""

    name: str
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def records(self) -> list[dict]:
        names = list(self.columns)
        cols = [self.columns[n].tolist() for n in names]
        return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]


def generate(query: Query, span_s: float, seed: int = 0, start_ms: int = 1_700_000_000_000) -> list[StreamEvents]:
    """Events of every stream of `query` over `span_s` seconds of event time."""
    if span_s <= 0:
        raise ValueError(f"span_s must be > 0 (got {span_s})")
    rng = np.random.default_rng(seed)
    out = []
    for b, stream in enumerate(query.streams):
        n = int(rng.poisson(stream.rate * span_s))
        ts = start_ms + np.floor(np.sort(rng.uniform(0.0, span_s, n)) * 1000).astype(np.int64)
        columns: dict[str, np.ndarray] = {"ts": ts, "id": np.arange(n, dtype=np.int64)}
        for attr, (values, weights) in _distributions(query, b).items():
            columns[attr] = values[rng.choice(len(values), size=n, p=weights)] if n else values[:0]
        out.append(StreamEvents(stream.name, columns))
    return out


def _distributions(query: Query, b: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per compared attribute of stream b: its values and their probabilities (first class naming it wins)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for cls in query.classes:
        for row, (member, attr) in enumerate(zip(cls.members, cls.attributes, strict=True)):
            if member != b or attr in out:
                continue
            if cls.weights is not None and cls.values is not None:
                p = np.asarray(cls.weights[row], dtype=float)
                out[attr] = (np.asarray(cls.values), p / p.sum())
            else:
                k = max(1, round(1.0 / float(cls.selectivity or 1.0)))
                out[attr] = (np.arange(k, dtype=np.int64), np.full(k, 1.0 / k))
    return out
