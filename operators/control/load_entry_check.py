"""The controller's check of one load report entry before anything is folded from it.

The job's Redis user may write the load stream, so an entry may hold anything. One that the controller could
not fold (a missing field, text for a number, columns of unequal length, a partition the job does not have)
made it raise, and a restarted controller resumed at the same entry: a crash loop. An entry is decoded here
strictly, the reports' shape (`connectors.redis.load_reports`) as pydantic models; what fails is refused with a reason
naming the field, and the reader skips it. Seconds are bounded as well as typed: an interval of 1e-320 s passed
and made the utilisation infinite, which crashed every restart (the arithmetic is guarded too: `bounded`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from windjoin.operators.control.finetune import FINE_DEPTH
from windjoin.operators.plain_numbers import plain_float, plain_int

MAX_COUNT = 2**63 - 1
# Seconds a batch or a slot took: 0 (not measured), or a nanosecond to about 11 days. Denormals and absurd values
# are refused, so the quotients the controller makes of them stay finite (a 1e-320 s interval made one infinite).
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e6
MIN_INTERVAL_S = 1e-6  # a batch's wall-clock span, when measured: a divisor of every busy second
MAX_WALL_S = 253_402_300_799.0  # finished_at: epoch seconds up to 9999-12-31 (the memory view counts its ms)


def _measurable(seconds: float) -> float:
    if 0 < seconds < MIN_SECONDS:
        raise ValueError(f"must be 0 or at least {MIN_SECONDS:g} s (got {seconds!r})")
    return seconds


Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
# an int too, never text; JSON has no NaN or infinity
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, strict=True), AfterValidator(_measurable)]
Histogram = Annotated[list[Count], Field(min_length=1 << FINE_DEPTH, max_length=1 << FINE_DEPTH)]
PartitionKey = Annotated[str, Field(pattern=r"^[0-9]{1,9}$")]


class ReportRefused(ValueError):
    """A load report entry the controller skips; the message names the field and what is wrong."""


@dataclass(frozen=True)
class ReportBounds:
    """The partitions and slots a report may name (None: not checked)."""

    partitions: int | None = None
    slots: int | None = None


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # reports carry more than the controller reads


class _Groups(_Report):
    part: list[Count] = []
    tuples_in: list[Count] | None = None
    outputs: list[Count] | None = None
    window_tuples: list[Count] | None = None
    state_bytes: list[Count] | None = None
    seconds: list[Seconds] | None = None
    cpu: list[Seconds] | None = None
    fine: list[Histogram] | None = None
    fine_in: list[Histogram] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> _Groups:
        n = len(self.part)
        if len(set(self.part)) != n:
            raise ValueError("part lists a partition twice")
        for name in type(self).model_fields:
            column = getattr(self, name)
            if column is None and n and name in _NEEDED:
                raise ValueError(f"column {name!r} is missing ('part' lists {n} partitions)")
            if column is not None and len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} values, 'part' has {n}")
        if self.fine_in is not None and self.fine is None:
            raise ValueError("column 'fine_in' comes with 'fine'")
        return self


# what the controller folds by partition (control_loop, memory_history); "cpu" falls back to "seconds"
_NEEDED = ("tuples_in", "outputs", "window_tuples", "state_bytes", "seconds")


class _Spill(_Report):
    spill_version: Count = 0
    generations: dict[PartitionKey, Count] | None = None
    reload_bytes: dict[PartitionKey, Count] | None = None


class _SlotReport(_Report):
    slot: Count
    joined: Count = 0
    outputs: Count = 0
    window_tuples: Count = 0
    state_bytes: Count = 0
    backlog: Count = 0
    seconds: Seconds = 0.0
    cpu_seconds: Seconds = 0.0
    groups: _Groups | None = None
    shed: dict[str, Count] | None = None
    spill: _Spill | None = None


def check_entry(fields: dict[bytes, bytes], bounds: ReportBounds) -> tuple[int, float, float, list[dict[str, Any]]]:
    """(batch id, finished at, interval s, slot reports) of a stream entry's fields, or ReportRefused."""
    text = _field(fields, "batch_id")
    batch_id = plain_int(text)
    if batch_id is None or not 0 <= batch_id <= MAX_COUNT:
        raise ReportRefused(f"batch_id must be a whole number in 0..{MAX_COUNT}, got {text[:40]!r}")
    finished_at = _seconds(fields, "finished_at", 0.0, MAX_WALL_S)
    interval_s = _seconds(fields, "interval_s", MIN_INTERVAL_S, MAX_SECONDS)
    try:
        slots = orjson.loads(fields.get(b"slots", b""))
    except orjson.JSONDecodeError as err:
        raise ReportRefused(f"slots is not JSON ({err})") from None
    if not isinstance(slots, list):
        raise ReportRefused(f"slots must be a JSON array of slot reports, got {type(slots).__name__}")
    checked = [_slot_report(i, report, bounds) for i, report in enumerate(slots)]
    if len({r.slot for r in checked}) != len(checked):
        raise ReportRefused("slots reports a slot twice")
    return batch_id, finished_at, interval_s, slots


def _field(fields: dict[bytes, bytes], key: str) -> str:
    raw = fields.get(key.encode())
    if raw is None:
        raise ReportRefused(f"{key} is missing")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise ReportRefused(f"{key} is not ASCII text: {raw[:40]!r}") from None


def _seconds(fields: dict[bytes, bytes], key: str, low: float, high: float) -> float:
    """A field of seconds: 0, or a plain decimal number within [low, high]."""
    text = _field(fields, key)
    value = plain_float(text)
    if value is None or not (value == 0 or low <= value <= high):
        raise ReportRefused(
            f"{key} must be a finite decimal number >= 0 (no '_' or spaces): 0 or within [{low:g}, {high:g}], "
            f"got {text[:40]!r}"
        )
    return value


def _slot_report(index: int, report: Any, bounds: ReportBounds) -> _SlotReport:
    try:
        checked = _SlotReport.model_validate(report)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in (f"slots[{index}]", *first["loc"]))
        raise ReportRefused(f"{where}: {first['msg']}") from None
    if bounds.slots is not None and checked.slot >= bounds.slots:
        raise ReportRefused(f"slots[{index}].slot {checked.slot} is outside the job's slots 0..{bounds.slots - 1}")
    if bounds.partitions is not None:
        named = [*(checked.groups.part if checked.groups else [])]
        if checked.spill is not None:
            named += [int(p) for p in {**(checked.spill.generations or {}), **(checked.spill.reload_bytes or {})}]
        outside = sorted({p for p in named if p >= bounds.partitions})
        if outside:
            raise ReportRefused(
                f"slots[{index}] names partition(s) {outside[:5]} outside the job's 0..{bounds.partitions - 1}"
            )
    return checked
