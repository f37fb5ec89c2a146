"""Event time per input partition: marks, idleness, the watermark and aligned reading, planned with each batch.

Each Kafka partition of a stream is in event-time order (within its own disorder), but the partitions are not
aligned with each other: a backlog read by equal offsets lets the sparse ones run ahead. So, as in the Dataflow
model and Flink (per-split watermarks; watermark alignment, FLIP-182):

* the *mark* of a partition is the newest event time read from it;
* the *watermark* is the minimum of the marks of the partitions that are not idle, less `allowed_lateness_ms`,
  and never moves back; a tuple behind it is late, and window state behind it (less the window) expires. A
  partition in order is never behind its own mark, so it never yields a late tuple, however far others run ahead;
* a partition is *idle* once it has been read to its end and its end has not moved for `idle_timeout_ms` of
  wall time: it stops holding the watermark back until it gets new records;
* reading is *aligned*: a partition whose (estimated) mark would end the batch more than `alignment_ms` ahead of
  where the slowest partition that is not idle ends it takes no more records than its measured density says fit
  under that bound, so the state held for the laggards stays bounded while catching up. As in Flink, the slowest
  is never held back: partitions that are all equally behind read as much as the batch's record limit allows.

All of it is planned on the driver with each batch and stored in the batch's offset (`EventTime.to_json`), so a
batch replayed after a crash judges lateness exactly as the first time. A batch's newest event times are only
known once it ran: the job reports them under the batch's `seq` (connectors.files.mark_reports) and the next batch's
plan takes them in. A report lost in a crash only leaves the marks behind: the watermark lags (less is late,
state is held a little longer), and nothing is judged late that the first plan would not have judged late.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROBE_RECORDS = 16  # records a partition not read yet may take in one batch while aligned reading is on
# A density measured over a few dozen records is off by tens of per cent: reading up to this share of the alignment
# ahead of the slowest partition, not all of it, keeps a partition that turns out sparser than measured within it.
DENSITY_MARGIN = 0.8


@dataclass(frozen=True)
class EventTimeConfig:
    """The spec's event-time settings (time windows only)."""

    allowed_lateness_ms: int
    idle_timeout_ms: int
    alignment_ms: int | None  # None: read without alignment


@dataclass(frozen=True)
class EventTime:
    """The event-time state a batch is planned and joined with (JSON in the batch's offset)."""

    seq: int = 0  # this batch's number among planned batches: its marks are reported under it
    watermark: int | None = None  # event time below which a tuple is late; None: nothing is late yet
    marks: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> newest event time read before
    marked_at: dict[str, int] = field(default_factory=dict)  # the position (next offset) each mark was taken at
    # (before the first mark: where reading started)
    density: dict[str, float] = field(default_factory=dict)  # records per ms of event time, from the last marks
    ends: dict[str, int] = field(default_factory=dict)  # each partition's log end when last seen
    since: dict[str, int] = field(default_factory=dict)  # wall ms at which that end was first seen
    idle: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "watermark": self.watermark,
            "marks": dict(sorted(self.marks.items())),
            "marked_at": dict(sorted(self.marked_at.items())),
            "density": dict(sorted(self.density.items())),
            "ends": dict(sorted(self.ends.items())),
            "since": dict(sorted(self.since.items())),
            "idle": list(self.idle),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any] | None) -> EventTime:
        if not data:
            return EventTime()
        return EventTime(
            seq=int(data["seq"]),
            watermark=None if data.get("watermark") is None else int(data["watermark"]),
            marks={k: int(v) for k, v in data.get("marks", {}).items()},
            marked_at={k: int(v) for k, v in data.get("marked_at", {}).items()},
            density={k: float(v) for k, v in data.get("density", {}).items()},
            ends={k: int(v) for k, v in data.get("ends", {}).items()},
            since={k: int(v) for k, v in data.get("since", {}).items()},
            idle=tuple(data.get("idle", ())),
        )

    def estimated_mark(self, key: str, position: int) -> float | None:
        """The partition's mark extrapolated to `position` by its density (records read since the mark)."""
        if key not in self.marks:
            return None
        ahead = position - self.marked_at.get(key, position)
        density = self.density.get(key)
        return self.marks[key] + (ahead / density if density and ahead > 0 else 0.0)


def first_event_time(positions: Mapping[str, int]) -> EventTime:
    """The state before the first batch: nothing known but where reading starts (to measure densities)."""
    return EventTime(marked_at={k: int(v) for k, v in positions.items()})


def next_event_time(
    previous: EventTime,
    reported: Mapping[str, tuple[int, int]] | None,
    positions: Mapping[str, int],
    bounds: Mapping[str, tuple[int, int]],
    now_ms: int,
    config: EventTimeConfig,
) -> EventTime:
    """The event time of the batch planned next, starting at `positions` (where the previous batch ended).

    `reported` holds the (oldest, newest) event time per partition read by the previous batch (None: not known,
    e.g. after a crash); `bounds` each partition's (low, high) offsets now.
    """
    marks, marked_at, density = dict(previous.marks), dict(previous.marked_at), dict(previous.density)
    for key, (oldest, newest) in (reported or {}).items():
        old = marks.get(key)
        if old is not None and newest <= old:
            continue
        if key in marked_at and key in positions:  # records per ms of event time since the last mark
            read = positions[key] - marked_at[key]
            gaps = read if old is not None else read - 1  # the first batch's oldest..newest spans read - 1 gaps
            measured = max(gaps, 1) / max(newest - (oldest if old is None else old), 1)
            density[key] = measured if key not in density else (density[key] + measured) / 2  # smoothed
        marks[key] = int(newest)
        if key in positions:
            marked_at[key] = int(positions[key])
    ends, since = dict(previous.ends), dict(previous.since)
    for key, (_, high) in bounds.items():
        if ends.get(key) != high:
            ends[key], since[key] = int(high), now_ms
    idle = tuple(
        sorted(
            key
            for key, (low, high) in bounds.items()
            if positions.get(key, low) >= high and now_ms - since[key] >= config.idle_timeout_ms
        )
    )
    watermark = previous.watermark
    active = [key for key in bounds if key not in idle]
    if active and all(key in marks for key in active):
        candidate = min(marks[key] for key in active) - config.allowed_lateness_ms
        watermark = candidate if watermark is None else max(watermark, candidate)
    return EventTime(previous.seq + 1, watermark, marks, marked_at, density, ends, since, idle)


def aligned_caps(
    event_time: EventTime,
    positions: Mapping[str, int],
    reads: Mapping[str, int],
    config: EventTimeConfig,
    done: frozenset[str] = frozenset(),
) -> dict[str, int] | None:
    """How many records each partition may read next so that none ends the batch over `alignment_ms` ahead of
    where the slowest partition that is not idle (nor in `done`: read to the end of a bounded run) ends it, given
    the records `reads` each would take without alignment (its share of the batch's limit); None: no alignment.
    Capping a partition leaves more of the limit to the others, so the slowest only ends further on: the bound
    holds. (Measured from where the slowest starts instead, a batch could never span more than `alignment_ms` of
    event time, and a job whose trigger is longer than that would fall further behind with every batch.)

    A partition never read yet takes `PROBE_RECORDS`, enough to measure its density without running far ahead
    (a sparse partition's equal share of a large batch can span minutes of event time); one read but without a
    mark or a density (no valid event time yet) is not capped."""
    if config.alignment_ms is None:
        return None
    caps = {}
    estimates = {}
    for key, position in positions.items():
        est = event_time.estimated_mark(key, position)
        if est is not None:
            estimates[key] = est
        elif position <= event_time.marked_at.get(key, position):
            caps[key] = PROBE_RECORDS
    floor_keys = [key for key in estimates if key not in event_time.idle and key not in done]
    if not floor_keys:
        return caps

    def batch_end(key: str) -> float:  # the mark estimated after reading its `reads` (no density: no progress)
        density = event_time.density.get(key)
        return estimates[key] + (reads.get(key, 0) / density if density else 0.0)

    floor = min(batch_end(key) for key in floor_keys)
    for key, est in estimates.items():
        density = event_time.density.get(key)
        if est >= floor + config.alignment_ms:
            caps[key] = 0
        elif density:  # as far as the slowest ends, then a margin under the bound (so the slowest is never capped)
            caps[key] = max(0, int(density * (floor + DENSITY_MARGIN * config.alignment_ms - est)))
    return caps
