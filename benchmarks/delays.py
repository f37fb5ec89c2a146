"""Production delays counted exactly, at 1 ms resolution: a benchmark's pairs can number millions a second."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_DELAY_MS = 600_000  # delay histogram range (1 ms bins); larger delays land in the last bin


@dataclass
class DelayHistogram:
    """Counts of delays at 1 ms resolution (negative delays counted as 0, see `negative`)."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(MAX_DELAY_MS + 1, dtype=np.int64))
    negative: int = 0

    def add(self, delays_ms: np.ndarray, weights: np.ndarray | None = None) -> None:
        if not len(delays_ms):
            return
        delays_ms = np.asarray(delays_ms, dtype=np.int64)
        neg = delays_ms < 0
        self.negative += int(weights[neg].sum() if weights is not None else neg.sum())
        clipped = np.clip(delays_ms, 0, MAX_DELAY_MS)
        self.counts += np.bincount(clipped, weights=weights, minlength=MAX_DELAY_MS + 1).astype(np.int64)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def quantile(self, q: float) -> float | None:
        total = self.total
        if not total:
            return None
        return float(np.searchsorted(np.cumsum(self.counts), q * total, side="left"))

    def summary(self) -> dict[str, Any]:
        return {
            "pairs": self.total,
            "p50_ms": self.quantile(0.5),
            "p99_ms": self.quantile(0.99),
            "max_ms": float(np.flatnonzero(self.counts)[-1]) if self.total else None,
            "negative": self.negative,
        }


def shifted(hist: DelayHistogram, ms: int) -> DelayHistogram:
    """`hist` with every delay `ms` shorter (a constant lag of the arrivals behind event time); floored at 0."""
    out = DelayHistogram(negative=hist.negative)
    ms = max(0, min(int(ms), MAX_DELAY_MS))
    out.counts[: MAX_DELAY_MS + 1 - ms] = hist.counts[ms:]
    out.counts[0] += hist.counts[:ms].sum()
    return out


def uniform_arrival_delays(progress: list[dict[str, Any]]) -> DelayHistogram:
    """The delays to commit that events arriving at an even pace would see behind a query's batches (1 event a ms).

    A batch fixes what it reads when its `latestOffset` returns and makes it visible when its trigger ends, so an
    event arriving between two batches' cuts waits for the end of the later one. Applied to a trivial query's
    progress reports, this is the floor of delay to commit that no work inside the batches can go under; applied
    to the job's own reports, it checks the model against the delays measured pair by pair.
    """
    cuts, ends = [], []
    for p in sorted(progress, key=lambda p: int(p["batchId"])):
        start = batch_start_ms(p)
        durations = p.get("durationMs", {})
        cuts.append(int(start + durations.get("latestOffset", 0)))
        ends.append(int(start + durations.get("triggerExecution", 0)))
    out = DelayHistogram()
    for previous_cut, cut, end in zip(cuts, cuts[1:], ends[1:], strict=False):
        out.add(end - np.arange(previous_cut, cut))
    return out


def batch_start_ms(progress: dict[str, Any]) -> float:
    """When a batch started (epoch ms), from its progress report's ISO timestamp."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
