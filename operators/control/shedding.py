"""S2J's shed ratio and a replay-deterministic per-record shed decision.

Above tau1 the shed ratio is SR = B + (1 - B) * g(x), x = (tau - tau1) / (1 - tau1), with g(x) = x (S2J's
linear model) or x^2 (a quadratic option); 0 at or below tau1, capped at 1. A record is shed when a 64-bit
hash of (topic, partition, offset) falls below SR * 2^64: a pure function of the control epoch's ratio and the
record's coordinates, so a replayed batch sheds exactly the same records, and raising the ratio only adds shed
records (the shed set at a lower ratio is a subset).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

RATIO_SCALE = 1 << 32  # the ratio is applied as an integer threshold on the hash's top 32 bits


def shed_ratio(tau: float, tau1: float, base: float = 0.0, model: str = "linear") -> float:
    """S2J's shed ratio for average utilisation tau."""
    if not 0 < tau1 < 1 or not 0 <= base <= 1:
        raise ValueError(f"need 0 < tau1 < 1 and 0 <= base <= 1, got tau1={tau1}, base={base}")
    if tau <= tau1:
        return 0.0
    x = (tau - tau1) / (1 - tau1)
    if model == "linear":
        g = x
    elif model == "quadratic":
        g = x * x
    else:
        raise ValueError(f"shedding model must be 'linear' or 'quadratic', got {model!r}")
    return min(1.0, base + (1 - base) * g)


def ratio_threshold(ratio: float) -> int:
    """The integer form of a ratio recorded in a control epoch: shed when the hash's top 32 bits are below it."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"shed ratio must be in [0, 1], got {ratio}")
    return round(ratio * RATIO_SCALE)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective avalanche on uint64."""
    x = x.copy()
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def record_hash(topic: str, partition: int, offsets: np.ndarray) -> np.ndarray:
    """A stable 64-bit hash of (topic, partition, offset) per offset, the same in every process."""
    seed = int.from_bytes(hashlib.blake2b(f"{topic}\x00{partition}".encode(), digest_size=8).digest(), "little")
    with np.errstate(over="ignore"):
        return _mix(np.asarray(offsets, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(seed))


def shed_mask(ratio: float, topic: str, partition: int, offsets: np.ndarray) -> np.ndarray:
    """Which of a Kafka partition's records (by offset) to shed at this ratio: True = drop."""
    threshold = ratio_threshold(ratio)
    if threshold == 0:
        return np.zeros(len(offsets), dtype=bool)
    return shed_mask_of_hashes(ratio, record_hash(topic, partition, offsets))


def shed_mask_of_hashes(ratio: float, hashes: np.ndarray) -> np.ndarray:
    """`shed_mask` from records' `record_hash` values (the top 32 bits decide; the low ones are left for other
    per-record choices, such as the store slot of a spread partition's tuple)."""
    threshold = ratio_threshold(ratio)
    if threshold >= RATIO_SCALE:
        return np.ones(len(hashes), dtype=bool)
    return (hashes >> np.uint64(32)) < np.uint64(threshold)


@dataclass
class ShedCounts:
    """Records kept and shed per stream, to expose as metrics and check against the ratio."""

    kept: dict[str, int] = field(default_factory=dict)
    shed: dict[str, int] = field(default_factory=dict)

    def add(self, stream: str, mask: np.ndarray) -> None:
        n_shed = int(np.count_nonzero(mask))
        self.shed[stream] = self.shed.get(stream, 0) + n_shed
        self.kept[stream] = self.kept.get(stream, 0) + len(mask) - n_shed

    def fraction(self, stream: str) -> float:
        total = self.kept.get(stream, 0) + self.shed.get(stream, 0)
        return self.shed.get(stream, 0) / total if total else 0.0

    def merged(self, other: ShedCounts) -> ShedCounts:
        streams: Mapping[str, int] = {**self.kept, **other.kept, **self.shed, **other.shed}
        return ShedCounts(
            {s: self.kept.get(s, 0) + other.kept.get(s, 0) for s in streams},
            {s: self.shed.get(s, 0) + other.shed.get(s, 0) for s in streams},
        )
