"""Per-task join counters (S2J efficiency P = outputs / comparisons) and a production-delay histogram."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Log-spaced bucket upper bounds from 1 µs to ~1.2 h: 4 buckets per doubling, so quantiles are within ~19%.
DELAY_BOUNDS_NS = np.unique(np.round(1000 * 2 ** (np.arange(0, 32 * 4 + 1) / 4)).astype(np.int64))


@dataclass
class DelayHistogram:
    """Production delays (ns) in fixed log buckets: recording is vectorised, memory is constant."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(DELAY_BOUNDS_NS) + 1, dtype=np.int64))
    total: int = 0
    max_ns: int = 0

    def record(self, delays_ns: np.ndarray) -> None:
        if len(delays_ns) == 0:
            return
        buckets = np.searchsorted(DELAY_BOUNDS_NS, delays_ns, side="left")
        self.counts += np.bincount(buckets, minlength=len(self.counts))
        self.total += len(delays_ns)
        self.max_ns = max(self.max_ns, int(delays_ns.max()))

    def add(self, other: DelayHistogram) -> None:
        """Count `other`'s delays too (histograms of joins that split one input)."""
        self.counts += other.counts
        self.total += other.total
        self.max_ns = max(self.max_ns, other.max_ns)

    def quantile_ns(self, q: float) -> int:
        """Upper bound of the bucket holding the q-quantile (0 when nothing was recorded)."""
        if self.total == 0:
            return 0
        rank = np.searchsorted(np.cumsum(self.counts), q * self.total, side="left")
        return int(DELAY_BOUNDS_NS[rank]) if rank < len(DELAY_BOUNDS_NS) else self.max_ns


@dataclass
class TaskCounters:
    """What one join task did: tuples in per stream, candidate checks, outputs, production delay."""

    tuples_in: dict[str, int] = field(default_factory=dict)
    comparisons: int = 0
    outputs: int = 0
    delay: DelayHistogram = field(default_factory=DelayHistogram)

    @property
    def efficiency(self) -> float:
        """S2J's P = outputs / comparisons (1.0 when nothing was compared)."""
        return self.outputs / self.comparisons if self.comparisons else 1.0

    def add(self, other: TaskCounters) -> None:
        """Count what `other` did too (the same task joined over another share of the input)."""
        for stream, n in other.tuples_in.items():
            self.tuples_in[stream] = self.tuples_in.get(stream, 0) + n
        self.comparisons += other.comparisons
        self.outputs += other.outputs
        self.delay.add(other.delay)

    def summary(self) -> dict[str, object]:
        return {
            "tuples_in": dict(self.tuples_in),
            "comparisons": self.comparisons,
            "outputs": self.outputs,
            "efficiency": self.efficiency,
            "delay_p50_ms": self.delay.quantile_ns(0.5) / 1e6,
            "delay_p99_ms": self.delay.quantile_ns(0.99) / 1e6,
            "delay_max_ms": self.delay.max_ns / 1e6,
        }
