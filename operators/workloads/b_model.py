"""The synthetic workload of Chakraborty & Singh (shared/papers/000): Poisson arrivals, b-model skewed join keys.

From the paper's "Data Stream Generation": the tuples of each stream S_i arrive as a Poisson process of rate
lambda_i (exponential inter-arrival times); the join attribute takes integer values in [0 .. 10 x 10^6]
distributed by the **b-model** (Wang, Ailamaki & Faloutsos 2002; related to the 80/20 law) with bias
b = 0.7 by default (their Table I; lambda = 1500 tuples/s).

b-model: the key domain is halved recursively; at every split a fraction b of the probability mass goes to
one half (the *hot* half) and 1 - b to the other, down to single keys. Which half is hot is decided per split
by a hash of the split and the seed, so the hot keys are scattered over the domain rather than piled at 0
(as in the b-model's random cascade). A key reached through c cold and h hot choices has probability
b^h (1-b)^c; in a domain of 2^n keys, C(n, c) keys have probability b^(n-c) (1-b)^c and the hottest has b^n.
Domains that are not a power of two split as [lo, lo + size//2) and the rest.

Every stream draws its join key from the same b-model (same seed), so hot keys coincide across streams and
actually join. The join attribute of a stream is its ``key``; a stream without one uses its first field in
an ``eq`` predicate; a stream with neither has no skewed field. Other fields are uniform: ints in 1..10^4
and floats in [1, 10^4) (the SplitJoin benchmark's value range), strings of 8 random lowercase letters, fair
bools. A skewed field of type float carries the key as a float, string as decimal text, bool as key parity.

Pure: no I/O, no clocks. The same configuration and seed give the same events (timestamps relative to
``start_ms``), whatever the caller does with them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from windjoin.operators.partitioning import partition_of
from windjoin.operators.predicate_ops import op_named
from windjoin.operators.spec import JoinSpec, StreamSpec

PAPER_RATE = 1500.0  # tuples/s per stream (Table I)
PAPER_BIAS = 0.7  # b (Table I)
PAPER_KEYS = 10_000_001  # join attribute domain [0 .. 10 x 10^6]
VALUE_LOW, VALUE_HIGH = 1, 10_000  # other numeric fields, as the SplitJoin benchmark
STRING_LENGTH = 8
SKEW_OVER = ("keys", "partitions", "slots")
CHUNK_S = 0.05  # events are generated in slices of this much schedule time (fixed: keeps runs reproducible)

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, vectorised over uint64 (a well-mixed hash of each element)."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return z ^ (z >> np.uint64(31))


class BModel:
    """Keys 0..n_keys-1 with b-model skew of bias ``bias`` (0.5: uniform, 1: all mass on one key)."""

    def __init__(self, n_keys: int, bias: float = PAPER_BIAS, seed: int = 0) -> None:
        if n_keys < 1:
            raise ValueError(f"n_keys must be >= 1 (got {n_keys})")
        if not 0.5 <= bias <= 1.0:
            raise ValueError(f"bias b must be in [0.5, 1] (got {bias}); 0.5 is uniform, 0.7 the paper's default")
        self.n_keys = int(n_keys)
        self.bias = float(bias)
        self.seed = int(seed)
        self.levels = int(self.n_keys - 1).bit_length()  # splits on the longest path: ceil(log2(n_keys))
        self._salt = _splitmix64(np.array([self.seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]

    def _hot_left(self, lo: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Whether the left half of split [lo, lo + size) is the hot one (a hash of the split and the seed)."""
        with np.errstate(over="ignore"):
            h = _splitmix64((lo.astype(np.uint64) * np.uint64(0x100000001B3)) ^ size.astype(np.uint64) ^ self._salt)
        return (h >> np.uint64(63)).astype(bool)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` keys (int64): one uniform draw per level decides hot or cold half."""
        lo = np.zeros(n, dtype=np.int64)
        size = np.full(n, self.n_keys, dtype=np.int64)
        for _ in range(self.levels):
            left = size // 2
            hot = rng.random(n) < self.bias
            go_left = hot == self._hot_left(lo, size)
            splitting = size > 1
            lo = np.where(splitting & ~go_left, lo + left, lo)
            size = np.where(splitting, np.where(go_left, left, size - left), size)
        return lo

    def probabilities(self) -> np.ndarray:
        """The exact probability of every key (float64 array of n_keys; meant for tests and small domains)."""
        lo = np.zeros(1, dtype=np.int64)
        size = np.full(1, self.n_keys, dtype=np.int64)
        mass = np.ones(1)
        out = np.zeros(self.n_keys)
        while lo.size:
            leaf = size == 1
            out[lo[leaf]] = mass[leaf]
            lo, size, mass = lo[~leaf], size[~leaf], mass[~leaf]
            left = size // 2
            hot_left = self._hot_left(lo, size)
            left_mass = np.where(hot_left, self.bias, 1 - self.bias) * mass
            lo, size, mass = (
                np.concatenate([lo, lo + left]),
                np.concatenate([left, size - left]),
                np.concatenate([left_mass, mass - left_mass]),
            )
        return out

    def hottest(self) -> tuple[int, float]:
        """The most likely key and its probability, b^(splits on its path)."""
        lo, size, p = 0, self.n_keys, 1.0
        while size > 1:
            left = size // 2
            hot_left = bool(self._hot_left(np.array([lo]), np.array([size]))[0])
            p *= self.bias
            if not hot_left:
                lo, left = lo + left, size - left
            size = left
        return lo, p


def poisson_arrivals(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s, ascending) of a Poisson process of ``rate`` events/s in [0, duration_s)."""
    return PoissonClock(rate, rng).until(duration_s)


class PoissonClock:
    """A Poisson process read forward in time slices; exponential gaps of mean 1/rate, drawn in blocks."""

    def __init__(self, rate: float, rng: np.random.Generator, block: int = 4096) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0 events/s (got {rate})")
        self.rate = float(rate)
        self._rng = rng
        self._block = block
        self._pending = np.empty(0)
        self._last = 0.0

    def until(self, t: float) -> np.ndarray:
        """The arrivals not yet returned that fall before ``t`` seconds."""
        while not self._pending.size or self._pending[-1] < t:
            gaps = self._rng.standard_exponential(self._block) / self.rate
            times = self._last + np.cumsum(gaps)
            self._last = float(times[-1])
            self._pending = np.concatenate([self._pending, times])
        cut = int(np.searchsorted(self._pending, t, side="left"))
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out


@dataclass(frozen=True)
class WorkloadConfig:
    rate: float = PAPER_RATE  # events/s per stream
    duration_s: float = 10.0
    seed: int = 0
    bias: float = PAPER_BIAS
    n_keys: int = PAPER_KEYS
    start_ms: int = 0  # event time of schedule time 0
    # "keys": the b-model over key values; "partitions": over the spec's hash partitions; "slots": over the hash
    # partitions, its first splits lined up with the round-robin slots (the static placement's worst case)
    skew_over: str = "keys"

    def __post_init__(self) -> None:
        if self.skew_over not in SKEW_OVER:
            raise ValueError(f"skew_over must be one of {SKEW_OVER} (got {self.skew_over!r})")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 events/s (got {self.rate})")
        if not self.duration_s > 0:
            raise ValueError(f"duration must be > 0 s (got {self.duration_s})")


def join_attribute(spec: JoinSpec, name: str) -> str | None:
    """The field of stream ``name`` that carries the skewed join key: its ``key``, else its first eq field."""
    stream = spec.streams[name]
    if stream.key is not None:
        return None if stream.key == stream.timestamp else stream.key
    for task in spec.tasks:
        for pred in task.on:
            if not op_named(pred.op).equates:
                continue
            for side_stream, field in (pred.left_ref, pred.right_ref):
                if side_stream == name and field != stream.timestamp:
                    return field
    return None


@dataclass
class Slice:
    """The events of one slice of schedule time, merged over streams in arrival order."""

    start_s: float
    end_s: float
    streams: list[str]  # per event
    offsets_s: np.ndarray  # per event: schedule time (s since the start)
    events: list[dict[str, Any]]


class _StreamSource:
    """One stream's arrivals and values, each drawn from its own random stream (so reproducible)."""

    def __init__(
        self,
        name: str,
        stream: StreamSpec,
        skewed: str | None,
        keys: BModel | PartitionSkewedKeys,
        config: WorkloadConfig,
    ):
        seeds = np.random.SeedSequence([config.seed, _stable_id(name)]).spawn(2 + len(stream.fields))
        self.name = name
        self.stream = stream
        self.skewed = skewed
        self.keys = keys
        self.clock = PoissonClock(config.rate, np.random.default_rng(seeds[0]))
        self.key_rng = np.random.default_rng(seeds[1])
        self.field_rngs = {f: np.random.default_rng(s) for f, s in zip(stream.fields, seeds[2:], strict=True)}
        self.start_ms = config.start_ms

    def columns(self, until_s: float) -> tuple[np.ndarray, dict[str, list[Any]]]:
        offsets, cols = self.arrays(until_s)
        return offsets, {name: col.tolist() for name, col in cols.items()}

    def arrays(self, until_s: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The arrivals before ``until_s`` not yet drawn and their columns (the timestamp, then the fields)."""
        offsets = self.clock.until(until_s)
        n = offsets.size
        cols: dict[str, np.ndarray] = {
            self.stream.timestamp: (self.start_ms + np.floor(offsets * 1000)).astype(np.int64)
        }
        for field, ftype in self.stream.fields.items():
            if field == self.skewed:
                cols[field] = _key_column(self.keys.sample(n, self.key_rng), ftype)
            else:
                cols[field] = uniform_column(ftype, n, self.field_rngs[field])
        return offsets, cols


def _stable_id(text: str) -> int:
    """A stable 32-bit number for a stream name (Python's hash() is salted per process)."""
    return zlib.crc32(text.encode("utf-8"))


def _key_column(keys: np.ndarray, ftype: str) -> np.ndarray:
    if ftype == "int":
        return keys
    if ftype == "float":
        return keys.astype(np.float64)
    if ftype == "bool":
        return (keys & 1).astype(bool)
    return keys.astype(str).astype(object)


def uniform_column(ftype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` values of a field type: ints 1..10^4, floats [1, 10^4), 8-letter lowercase strings, fair bools."""
    if ftype == "int":
        return rng.integers(VALUE_LOW, VALUE_HIGH + 1, size=n, dtype=np.int64)
    if ftype == "float":
        return rng.uniform(VALUE_LOW, VALUE_HIGH, size=n)
    if ftype == "bool":
        return rng.random(n) < 0.5
    letters = rng.integers(97, 123, size=(n, STRING_LENGTH), dtype=np.uint8)
    return letters.view(f"S{STRING_LENGTH}").ravel().astype(str).astype(object)


class PartitionSkewedKeys:
    """Keys whose *hash partitions* follow the b-model (keys uniform inside a partition).

    Hashing scatters a b-model over 10^7 key values evenly over partitions (per-partition loads within ~1%),
    so it loads slots alike; skew between partitions, the case partition moves exist for, needs the b-model
    applied to the partition itself. Keys are drawn from the first `CANDIDATES` values of the domain.

    The b-model halves the partition numbers [0, n) recursively; round robin (slot = partition mod slots) then
    gives each slot partitions from all over the range, which mixes hot and cold halves (4 slots, 16
    partitions: the busiest slot gets 1.2-1.8x the mean, depending on the seed). With `slots` given, the b-model
    runs over positions i instead and position i is partition (i mod n/slots) * slots + i // (n/slots): the
    first log2(slots) splits then choose the slot, so the busiest slot gets b^log2(slots) of the tuples,
    slots * b^log2(slots) times the mean (b = 0.7: 1.96 for 4 slots, 2.74 for 8, 3.84 for 16).
    """

    CANDIDATES = 1 << 20

    def __init__(self, n_keys: int, partitions: int, bias: float, seed: int, slots: int | None = None) -> None:
        if slots is not None and (slots < 1 or partitions % slots):
            raise ValueError(f"aligning the skew with slots needs slots dividing partitions, got {slots}, {partitions}")
        self.partitions = BModel(partitions, bias, seed)
        per_slot = partitions // slots if slots else partitions
        position = np.arange(partitions)
        self.partition_at = (position % per_slot) * (slots or 1) + position // per_slot  # identity without slots
        candidates = np.arange(min(n_keys, self.CANDIDATES), dtype=np.int64)
        parts = partition_of(candidates, partitions)
        self.by_partition = [candidates[parts == p] for p in range(partitions)]
        empty = [p for p, keys in enumerate(self.by_partition) if not len(keys)]
        if empty:
            raise ValueError(f"{n_keys} key values leave partitions {empty[:5]} without a key; use more keys")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        parts = self.partition_at[self.partitions.sample(n, rng)]
        out = np.empty(n, dtype=np.int64)
        for p in np.unique(parts):
            rows = parts == p
            keys = self.by_partition[p]
            out[rows] = keys[rng.integers(0, len(keys), int(rows.sum()))]
        return out


class Workload:
    """The paper's workload for every stream of a spec, read as slices of ``CHUNK_S`` schedule seconds."""

    def __init__(self, spec: JoinSpec, config: WorkloadConfig) -> None:
        self.spec = spec
        self.config = config
        self.keys = (
            BModel(config.n_keys, config.bias, config.seed)
            if config.skew_over == "keys"
            else PartitionSkewedKeys(
                config.n_keys,
                spec.partitions,
                config.bias,
                config.seed,
                spec.slots if config.skew_over == "slots" else None,
            )
        )
        self.join_attributes = {name: join_attribute(spec, name) for name in spec.streams}
        self._sources = [
            _StreamSource(name, stream, self.join_attributes[name], self.keys, config)
            for name, stream in spec.streams.items()
        ]

    def column_slices(self) -> Iterator[tuple[float, dict[str, dict[str, np.ndarray]]]]:
        """Per slice: its end (schedule s) and each stream's columns as arrays, in arrival order per stream: the
        same draws as `slices` (use one or the other on a workload), for callers that encode whole columns."""
        n_slices = max(1, int(np.ceil(self.config.duration_s / CHUNK_S - 1e-9)))
        for i in range(n_slices):
            end = min((i + 1) * CHUNK_S, self.config.duration_s)
            yield end, {source.name: source.arrays(end)[1] for source in self._sources}

    def slices(self) -> Iterator[Slice]:
        """Consecutive slices covering [0, duration_s); each holds the events scheduled inside it."""
        n_slices = max(1, int(np.ceil(self.config.duration_s / CHUNK_S - 1e-9)))
        for i in range(n_slices):
            start, end = i * CHUNK_S, min((i + 1) * CHUNK_S, self.config.duration_s)
            names: list[str] = []
            offsets: list[np.ndarray] = []
            events: list[dict[str, Any]] = []
            for source in self._sources:
                times, cols = source.columns(end)
                fields = list(cols)
                events.extend(dict(zip(fields, values, strict=True)) for values in zip(*cols.values(), strict=True))
                names.extend([source.name] * times.size)
                offsets.append(times)
            all_offsets = np.concatenate(offsets) if offsets else np.empty(0)
            order = np.argsort(all_offsets, kind="stable")
            yield Slice(
                start,
                end,
                [names[j] for j in order],
                all_offsets[order],
                [events[j] for j in order],
            )
