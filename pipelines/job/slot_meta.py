"""A slot's metadata in Spark state (ValueState "meta") as a typed object, converted to and from its stored form here.

The stored form is one JSON object (orjson), unchanged from the untyped dict the job kept before: fields an older
checkpoint lacks (`min_ts` of a segment, a partition's spill `span`, `reload_bytes`, `retired`) read as their
defaults, and `watermark`, `held` and `spill` are left out while unset, as before, so checkpoints restore both ways.
Partitions stay the JSON object keys they are stored as (`PartKey`): a slot of a large table holds tens of
thousands of them, and converting every key on every batch would cost more than the batch's state calls.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from windjoin.operators.control.job_epoch import Holders
from windjoin.operators.partitioning import Group

PartKey = str  # a partition number as stored: the key of a JSON object
HeldJson = dict[str, list[int]]  # a whole partition as "p", a mini-group as "p.depth.pattern", with its holders


@dataclass
class SegmentInfo:
    """A stored segment (MapState, by `id`) and what decides its expiry, per partition it holds tuples of."""

    id: int
    max_ts: dict[PartKey, int]
    ends: dict[PartKey, dict[str, int]]  # per stream, the arrival count through its last tuple here (count windows)
    min_ts: dict[PartKey, int] = field(default_factory=dict)  # empty in segments written before it was recorded


@dataclass
class PartitionSpill:
    """A partition's pushes (paper 004): generation numbers on disk, the next one, the pushed event times, totals."""

    next_gen: int = 0
    gens: list[int] = field(default_factory=list)
    pushed_tuples: int = 0
    pushed_bytes: int = 0
    reload_bytes: int = 0  # window bytes pushed since the last clean-up: what a clean-up brings back into memory
    cleanups: int = 0
    span: list[int] | None = None  # [oldest, newest] pushed event time, until the clean-up
    retired: list[int] = field(default_factory=list)  # merged by this batch's clean-up, deleted in the next

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionSpill:
        return cls(
            next_gen=data["next_gen"],
            gens=data["gens"],
            pushed_tuples=data["pushed_tuples"],
            pushed_bytes=data["pushed_bytes"],
            reload_bytes=data.get("reload_bytes", 0),
            cleanups=data["cleanups"],
            span=data.get("span"),
            retired=data.get("retired", []),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.retired:
            del data["retired"]  # written only between a clean-up and the next batch, as before
        return data


@dataclass
class SlotMeta:
    """What a slot keeps beside its segments: the live segments, per-partition positions, the watermark, the units
    it holds, its pushes, and the state version (`nonce`, fresh on every write) its cached windows are valid for."""

    nonce: str = ""
    next_segment: int = 0
    segments: list[SegmentInfo] = field(default_factory=list)
    max_ts: dict[PartKey, int] = field(default_factory=dict)  # per partition, the newest event time seen
    counts: dict[PartKey, dict[str, int]] = field(default_factory=dict)  # per partition and stream, arrivals
    watermark: int | None = None
    held: HeldJson | None = None  # None until the slot's first batch: it then holds what the first epoch routes to it
    spill: dict[PartKey, PartitionSpill] = field(default_factory=dict)

    @classmethod
    def from_stored(cls, data: bytes) -> SlotMeta:
        raw = orjson.loads(data)
        return cls(
            nonce=raw["nonce"],
            next_segment=raw["next_segment"],
            segments=[SegmentInfo(s["id"], s["max_ts"], s["ends"], s.get("min_ts", {})) for s in raw["segments"]],
            max_ts=raw["max_ts"],
            counts=raw["counts"],
            watermark=raw.get("watermark"),
            held=raw.get("held"),
            spill={p: PartitionSpill.from_json(s) for p, s in raw.get("spill", {}).items()},
        )

    def to_stored(self) -> bytes:
        raw: dict[str, Any] = {
            "nonce": self.nonce,
            "next_segment": self.next_segment,
            "segments": self.segments,
            "max_ts": self.max_ts,
            "counts": self.counts,
        }
        if self.watermark is not None:
            raw["watermark"] = self.watermark
        if self.held is not None:
            raw["held"] = self.held
        if self.spill:
            raw["spill"] = {p: s.to_json() for p, s in self.spill.items()}
        return orjson.dumps(raw)  # orjson writes the dataclasses as objects of their fields

    def take_watermark(self, watermark: int | None) -> None:
        """The batch's watermark (planned with its offsets, so a replay gets the same); it never moves back."""
        if watermark is not None:
            self.watermark = watermark if self.watermark is None else max(self.watermark, watermark)

    def positions(self, part: int) -> dict[str, Any]:
        """What a receiver of a piece of `part` needs to number arrivals like this slot (`MovedGroup.positions`)."""
        key = str(part)
        # the watermark its outer, semi and anti tuples were last closed at (`SegmentStore.take_rows`)
        return {"max_ts": self.max_ts.get(key), "counts": self.counts.get(key, {}), "watermark": self.watermark}

    def pushed(self, part: PartKey) -> list[int]:
        """The generations of `part` on disk (none when it never pushed)."""
        spill = self.spill.get(part)
        return spill.gens if spill is not None else []

    def held_groups(self) -> dict[Group, Holders]:
        return {group_of(k): tuple(h) for k, h in (self.held or {}).items()}


def held_json(held: dict[Group, Holders]) -> HeldJson:
    """`SlotMeta.held` of units with their holders, keyed by `Group.key`."""
    return {g.key: list(h) for g, h in sorted(held.items())}


def group_of(key: str) -> Group:
    """The unit a `SlotMeta.held` key names (`Group.key`)."""
    return Group.from_key(key)
