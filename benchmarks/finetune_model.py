"""An operator-level model of the controlled cluster: one real WindowJoin per routing unit (partition or
mini-group), the controller's pure `control_step` every reorganisation epoch, and a simulated clock.

Each distribution epoch (D seconds of event time) is one batch. A slot's batch time is the CPU seconds
(thread time) its units' joins took for the batch, times `slowdown` (the model's nodes are that much slower
than this machine's core, so sweeps fit in minutes); a slot starts a batch when the batch has arrived (its
epoch ended) and the slot finished the previous one, and a pair's production delay is the slot's finish time
minus the later tuple's event time. Moves and re-cuts land at once between batches (the window state is
handed over with `take_rows`; its transfer time is not charged). Pairs are counted with an order-free
checksum so a run can be checked against a run without control.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from windjoin.operators.batch import Arrivals
from windjoin.operators.control.config import ControlConfig
from windjoin.operators.control.epoch import ControlState, control_step
from windjoin.operators.control.finetune import FINE_DEPTH, fine_sizes
from windjoin.operators.control.load import Load, SlotBatch, aggregate_epoch
from windjoin.operators.control.window_rows import take_rows
from windjoin.operators.join import WindowJoin
from windjoin.operators.partitioning import Group, RoutingTable, key_hash, mini_bits, partition_of_hash
from windjoin.operators.spec import JoinSpec, parse_spec

STREAMS = ("R", "S")


def equi_spec(window_ms: int, partitions: int, slots: int) -> JoinSpec:
    fields = {"k": "int", "id": "int"}
    return parse_spec(
        {
            "window": {"kind": "time", "size_ms": window_ms},
            "allowed_lateness_ms": 0,  # batches arrive in event-time order
            "streams": {s: {"fields": fields, "key": "k"} for s in STREAMS},
            "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
            "partitions": partitions,
            "slots": slots,
        }
    )


@dataclass(frozen=True)
class Tuples:
    """Both streams' tuples in event-time order: stream (0 = R, 1 = S), key, id, timestamp (ms)."""

    stream: np.ndarray
    k: np.ndarray
    id: np.ndarray
    ts: np.ndarray

    def take(self, rows: np.ndarray) -> Tuples:
        return Tuples(self.stream[rows], self.k[rows], self.id[rows], self.ts[rows])


def pair_checksum(r_id: np.ndarray, s_id: np.ndarray) -> int:
    """An order-free checksum of (R id, S id) pairs (uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        mixed = (r_id.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ s_id.astype(np.uint64)
        return int(mixed.sum(dtype=np.uint64))


@dataclass
class BatchRecord:
    t: float  # the batch's arrival (end of its distribution epoch), simulated seconds
    slots: int  # active slots
    slot_seconds: list[float]  # simulated batch time per slot
    finish: float  # the last slot's finish time
    pairs: int
    units: int
    mini_groups: int


@dataclass
class ModelCluster:
    """Units with their own WindowJoins, placed on slots by the control state's routing."""

    spec: JoinSpec
    config: ControlConfig | None  # None: no control (the static round robin)
    slots: int
    batch_s: float
    epoch_batches: int
    slowdown: float
    use_indexes: bool = False  # paper 000 joins inside a partition with nested loops
    joins: dict[Group, WindowJoin] = field(default_factory=dict)
    free_at: dict[int, float] = field(default_factory=dict)
    reports: list[SlotBatch] = field(default_factory=list)
    records: list[BatchRecord] = field(default_factory=list)
    delays: list[np.ndarray] = field(default_factory=list)
    pairs: int = 0
    checksum: int = 0
    cpu_s: float = 0.0
    moves: int = 0
    retunes: int = 0
    max_mini_groups: int = 0

    def __post_init__(self) -> None:
        self.state = ControlState.initial(self.spec.partitions, self.slots)
        self.joins = {g: WindowJoin(self.spec, self.use_indexes) for g in self.state.routing.groups()}

    def run_batch(self, batch_no: int, tuples: Tuples) -> None:
        routing = self.state.routing
        units = routing.groups()
        h = key_hash(tuples.k)
        parts, bits = partition_of_hash(h, routing.partitions), mini_bits(h, routing.partitions)
        arrived = (batch_no + 1) * self.batch_s
        slot_cpu = {s: 0.0 for s in range(self.state.slots)}
        group_loads: dict[int, dict[Group, Load]] = {s: {} for s in slot_cpu}
        later_ts: dict[int, list[np.ndarray]] = {s: [] for s in slot_cpu}
        by_partition: dict[int, list[Group]] = {}
        for g in units:
            by_partition.setdefault(g.partition, []).append(g)
        for p in np.unique(parts).tolist():
            in_p = np.flatnonzero(parts == p)
            for g in by_partition[p]:
                rows = in_p[g.contains(parts[in_p], bits[in_p])] if g.depth else in_p
                if not len(rows):
                    continue
                slot = units[g]
                seconds, ts = self._process(g, tuples.take(rows))
                slot_cpu[slot] += seconds
                group_loads[slot][g] = Load(tuples_in=len(rows), processing_s=seconds * self.slowdown, cpu_s=seconds)
                later_ts[slot].append(ts)
        times = []
        for s, cpu in slot_cpu.items():
            busy = cpu * self.slowdown
            start = max(arrived, self.free_at.get(s, 0.0))
            self.free_at[s] = start + busy
            times.append(busy)
            if later_ts[s]:
                self.delays.append(self.free_at[s] - np.concatenate(later_ts[s]) / 1000)
            total = Load(sum(x.tuples_in for x in group_loads[s].values()), busy, cpu_s=cpu)
            self.reports.append(SlotBatch(batch_no, s, self.batch_s, total, group_loads[s]))
        self.cpu_s += sum(slot_cpu.values())
        mini = sum(1 for g in units if g.depth)
        self.max_mini_groups = max(self.max_mini_groups, mini)
        produced = sum(len(x) for x in later_ts.values() for x in x)
        self.records.append(
            BatchRecord(arrived, self.state.slots, times, max(self.free_at.values()), produced, len(units), mini)
        )
        if self.config is not None and (batch_no + 1) % self.epoch_batches == 0:
            self._control()

    def _process(self, g: Group, t: Tuples) -> tuple[float, np.ndarray]:
        """Join one unit's share of a batch; its CPU seconds and the later tuple's timestamp of every pair."""
        order = np.arange(len(t.k))
        chunk = {}
        for i, s in enumerate(STREAMS):
            mine = t.stream == i
            chunk[s] = Arrivals({"k": t.k[mine], "id": t.id[mine], "ts": t.ts[mine]}, order[mine])
        start = time.thread_time()
        result = self.joins[g].process(chunk)
        seconds = time.thread_time() - start
        (pairs,) = result.pairs
        self.pairs += len(pairs)
        self.checksum = (self.checksum + pair_checksum(pairs.sides["R"]["id"], pairs.sides["S"]["id"])) % 2**64
        return seconds, np.maximum(pairs.sides["R"]["ts"], pairs.sides["S"]["ts"])

    def _fine(self) -> dict[int, np.ndarray]:
        """Each partition's window tuples by its FINE_DEPTH low mini bits (what the job's load reports carry)."""
        out: dict[int, np.ndarray] = {}
        n = self.spec.partitions
        for g, join in self.joins.items():
            keys = [b.tuples.columns["k"] for store in join.stores.values() for b in store.blocks]
            hist = fine_sizes(key_hash(np.concatenate(keys)), n, g.partition, FINE_DEPTH) if keys else None
            if hist is not None:
                out[g.partition] = out.get(g.partition, 0) + hist
        return out

    def _control(self) -> None:
        assert self.config is not None
        load = aggregate_epoch(self.reports, list(range(self.state.slots)), self.config.reorganisation.occupancy)
        self.reports = []
        decision = control_step(self.state, load, self.config, fine=self._fine())
        self.moves += len(decision.moves)
        self.retunes += len(decision.retuned)
        self._recut(decision.state.routing)
        self.state = decision.state

    def _recut(self, routing: RoutingTable) -> None:
        """Give every new unit the window tuples of the old units it overlaps (a split or a merge)."""
        new_units = set(routing.groups())
        old = {g: j for g, j in self.joins.items() if g not in new_units}
        for g in new_units - set(self.joins):
            join = WindowJoin(self.spec, self.use_indexes)
            for source_group, source in old.items():
                if not (g.covers(source_group) or source_group.covers(g)):
                    continue
                for stream in STREAMS:
                    rows = take_rows(source, stream, self._selector(g))
                    if len(rows["k"]):
                        join.preload(stream, rows)
                if source.max_event_ts is not None:
                    join.advance_event_time(source.max_event_ts)
            self.joins[g] = join
        for g in old:
            del self.joins[g]

    def _selector(self, g: Group):
        n = self.spec.partitions

        def select(columns: dict[str, np.ndarray]) -> np.ndarray:
            h = key_hash(columns["k"].astype(np.int64))
            return g.contains(partition_of_hash(h, n), mini_bits(h, n))

        return select

    def summary(self, warmup_batches: int = 0) -> dict[str, object]:
        steady = self.records[warmup_batches:]
        delays = np.concatenate(self.delays) if self.delays else np.zeros(0)
        per_slot = np.array([sum(r.slot_seconds) / max(1, r.slots) for r in steady]) if steady else np.zeros(0)
        return {
            "pairs": self.pairs,
            "checksum": self.checksum,
            "cpu_s": self.cpu_s,
            "sim_cpu_s": self.cpu_s * self.slowdown,
            "slowest_slot_batch_s": float(np.mean([max(r.slot_seconds) for r in steady])) if steady else 0.0,
            "mean_slot_batch_s": float(per_slot.mean()) if len(per_slot) else 0.0,
            "delay_mean_s": float(delays.mean()) if len(delays) else 0.0,
            "delay_p99_s": float(np.percentile(delays, 99)) if len(delays) else 0.0,
            "moves": self.moves,
            "retuned_partitions": self.retunes,
            "max_mini_groups": self.max_mini_groups,
            "slot_seconds_used": float(sum(r.slots for r in self.records) * self.batch_s),
        }
