"""The load metrics the join job reports per batch, and their aggregation over a reorganisation epoch.

Per slot and per group (a partition or mini-group) each batch reports tuples in, processing seconds, backlog
(tuples waiting), state bytes and outputs. Paper 000 measures a slot's load as its average buffer occupancy
over the epoch: the mean of per-batch samples divided by the buffer's capacity. In a micro-batch engine every
slot runs once per batch, so "busy" occupancy (processing seconds / batch interval) is the default and
"backlog" occupancy (backlog / capacity) the paper's own measure. "share" occupancy (a slot's part of the
batch's processing seconds over all slots; 1/slots is a fair share) compares slots with one another whatever
the machine's speed, for slots sharing cores (local mode, oversubscribed executors); "cpu" does the same with
the CPU seconds the slot's worker spent (not inflated by waiting for a core on a loaded machine, as wall
seconds are); "tuples" with input tuples (deterministic: the same workload and routing give the same shares).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from windjoin.operators.control.bounded import ratio
from windjoin.operators.partitioning import Group


@dataclass(frozen=True)
class Load:
    """What one slot, or one group inside it, did in one batch."""

    tuples_in: int = 0
    processing_s: float = 0.0
    backlog: int = 0
    state_bytes: int = 0
    outputs: int = 0
    cpu_s: float = 0.0  # CPU seconds of the worker for this work (0 where not measured)

    def __add__(self, other: Load) -> Load:
        return Load(
            self.tuples_in + other.tuples_in,
            self.processing_s + other.processing_s,
            self.backlog + other.backlog,
            self.state_bytes + other.state_bytes,
            self.outputs + other.outputs,
            self.cpu_s + other.cpu_s,
        )


@dataclass(frozen=True)
class SlotBatch:
    """One slot's report for one batch: its total and the share of each group it holds."""

    batch_id: int
    slot: int
    interval_s: float  # the batch's wall-clock span (trigger interval or actual), for busy occupancy
    total: Load
    groups: Mapping[Group, Load] = field(default_factory=dict)


@dataclass(frozen=True)
class EpochLoad:
    """A reorganisation epoch's load: per slot the average occupancy, per group its summed work, last state."""

    batches: int
    occupancy: dict[int, float]  # slot -> average occupancy in [0, inf) (1 = full)
    slot_load: dict[int, Load]  # slot -> summed tuples, seconds, outputs; last backlog and state bytes
    group_load: dict[Group, Load]  # group -> the same, wherever it ran in the epoch
    group_slot: dict[Group, int]  # group -> the slot that reported it last


def occupancy_sample(
    report: SlotBatch,
    kind: str = "busy",
    backlog_capacity: float | None = None,
    batch_seconds: float = 0.0,
    batch_tuples: int = 0,
    batch_cpu: float = 0.0,
) -> float:
    """One batch's occupancy of a slot: busy share of the batch interval, backlog over buffer capacity, or its
    share of the batch's processing seconds (`batch_seconds`), CPU seconds (`batch_cpu`) or input tuples
    (`batch_tuples`) over all slots; finite however small the divisor (`bounded.ratio`)."""
    if kind == "share":
        return ratio(report.total.processing_s, batch_seconds)
    if kind == "cpu":
        return ratio(report.total.cpu_s, batch_cpu)
    if kind == "tuples":
        return ratio(report.total.tuples_in, batch_tuples)
    if kind == "busy":
        return ratio(report.total.processing_s, report.interval_s)
    if kind == "backlog":
        if not backlog_capacity:
            raise ValueError("backlog occupancy needs backlog_capacity > 0")
        return ratio(report.total.backlog, backlog_capacity)
    raise ValueError(f"occupancy kind must be one of {OCCUPANCY_KINDS}, got {kind!r}")


OCCUPANCY_KINDS = ("busy", "backlog", "share", "cpu", "tuples")
# the group measure that apportions a slot's occupancy among its groups (control.reorganise, pick "balance"):
# its join work (the job's per-partition seconds and CPU count its output pairs), or tuples for the tuple kinds
GROUP_MEASURE = {
    "busy": "processing_s",
    "backlog": "tuples_in",
    "share": "processing_s",
    "cpu": "cpu_s",
    "tuples": "tuples_in",
}


def aggregate_epoch(
    reports: Iterable[SlotBatch],
    slots: Sequence[int],
    kind: str = "busy",
    backlog_capacity: float | None = None,
) -> EpochLoad:
    """Average each slot's occupancy over the epoch's batches; a slot that reported nothing is idle (0).

    Counters (tuples, seconds, outputs) add up; gauges (backlog, state bytes) keep the latest batch's value."""
    samples: dict[int, list[float]] = {s: [] for s in slots}
    slot_load: dict[int, Load] = {s: Load() for s in slots}
    group_load: dict[Group, Load] = {}
    group_slot: dict[Group, int] = {}
    batch_ids = set()
    reports = sorted(reports, key=lambda r: (r.batch_id, r.slot))
    batch_total: dict[int, Load] = {}
    for report in reports:
        batch_total[report.batch_id] = batch_total.get(report.batch_id, Load()) + report.total
    for report in reports:
        batch_ids.add(report.batch_id)
        total = batch_total[report.batch_id]
        sample = occupancy_sample(report, kind, backlog_capacity, total.processing_s, total.tuples_in, total.cpu_s)
        samples.setdefault(report.slot, []).append(sample)
        slot_load[report.slot] = _accumulate(slot_load.get(report.slot, Load()), report.total)
        for group, load in report.groups.items():
            group_load[group] = _accumulate(group_load.get(group, Load()), load)
            group_slot[group] = report.slot
    n = len(batch_ids)
    occupancy = {s: (sum(v) / n if n else 0.0) for s, v in samples.items()}
    return EpochLoad(n, occupancy, slot_load, group_load, group_slot)


def _accumulate(acc: Load, new: Load) -> Load:
    """Counters add; gauges (backlog, state) take the newer value."""
    return Load(
        acc.tuples_in + new.tuples_in,
        acc.processing_s + new.processing_s,
        new.backlog,
        new.state_bytes,
        acc.outputs + new.outputs,
        acc.cpu_s + new.cpu_s,
    )


def utilisation(epoch: EpochLoad, capacity: float, workers: int | None = None) -> float:
    """S2J's tau = w / W: the average tuples per batch per worker over the epoch, over one worker's capacity."""
    workers = workers if workers is not None else len(epoch.occupancy)
    if epoch.batches == 0 or workers == 0:
        return 0.0
    tuples = sum(load.tuples_in for load in epoch.slot_load.values())
    return ratio(tuples, epoch.batches * workers * capacity)


def group_weights(epoch: EpochLoad, measure: str = "tuples_in") -> Mapping[Group, float]:
    """Each group's share of work by one Load field (tuples_in, processing_s, cpu_s, state_bytes, outputs)."""
    return {g: float(getattr(load, measure)) for g, load in epoch.group_load.items()}
