"""One site's share of an execution plan: its join instances, fed in event-time order, and where their rows go.

Rows are columnar: for each base stream b of a (composite) stream, columns ``c{b}_ts``, ``c{b}_id`` and
``c{b}_a{j}`` (its j-th compared attribute), plus ``ts``, the largest base timestamp (the time the combination
was complete). Every channel delivers rows in non-decreasing ``ts`` order and announces *watermarks*: a watermark
w on a channel means every later row of it has ``ts > w``.

An instance joins once the minimum watermark over all its feeds passes rows it holds: those rows are merged
in ``ts`` order into one chunk for MJoin (`operators/mjoin.py`; one input stream per slot, the equality classes
as ``eq`` predicates between slots). Fed in ``ts`` order, MJoin never sees a late tuple, and each combination is
found once, by its last arrival. MJoin's window test runs on the slots' ``ts``; a combination of composite
inputs must also fit the window over all its base timestamps (max − min <= window), checked afterwards — a
combination that fits passes MJoin's test too, so nothing is lost. The instance's output watermark is then its
input watermark. Since each plan tree is acyclic, watermarks always advance, and a site whose sources ended
(watermark `END`) finishes once every instance reached `END`.

Pure: the caller feeds source rows, received rows and watermarks, and ships what `step` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from windjoin.operators.batch import Arrivals
from windjoin.operators.mjoin import MJoin
from windjoin.operators.pmjoin.execution import ExecutionPlan, Feed, Instance
from windjoin.operators.pmjoin.model import bits
from windjoin.operators.spec import parse_spec

Rows = dict[str, np.ndarray]
END = 2**62  # watermark of a channel that has ended
BEFORE = -(2**62)  # watermark before anything is known
TS = "ts"


def base_columns(plan: ExecutionPlan, b: int) -> dict[str, str]:
    """Column name → type of base stream b inside rows."""
    info = plan.streams[b]
    out = {f"c{b}_ts": "int", f"c{b}_id": "int"}
    for j, t in enumerate(info.types):
        out[f"c{b}_a{j}"] = t
    return out


def row_columns(plan: ExecutionPlan, mask: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for b in bits(mask):
        out.update(base_columns(plan, b))
    return out


def empty_rows(plan: ExecutionPlan, mask: int) -> Rows:
    rows = {name: np.zeros(0, dtype=np.int64 if t == "int" else object) for name, t in row_columns(plan, mask).items()}
    rows[TS] = np.zeros(0, dtype=np.int64)
    return rows


def n_rows(rows: Rows) -> int:
    return len(rows[TS])


def take(rows: Rows, index: np.ndarray) -> Rows:
    return {name: col[index] for name, col in rows.items()}


def concat(parts: list[Rows]) -> Rows:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def class_column(plan: ExecutionPlan, class_index: int, mask: int) -> str:
    """The column holding class `class_index`'s value in rows of `mask` (any member: they are equal there)."""
    cls = plan.classes[class_index]
    names = [s.name for s in plan.streams]
    for member, attr in zip(cls.members, cls.attributes, strict=True):
        b = names.index(member)
        if mask >> b & 1:
            return f"c{b}_a{plan.streams[b].attributes.index(attr)}"
    raise ValueError(f"rows of {plan.stream_names(mask)} carry no attribute of class {cls.name}")


def select(plan: ExecutionPlan, feed: Feed, rows: Rows) -> Rows:
    """The rows a feed lets through (its group's values), all rows without a filter."""
    if feed.filter_class is None:
        return rows
    column = rows[class_column(plan, feed.filter_class, feed.mask)]
    return take(rows, np.flatnonzero(np.isin(column, np.asarray(feed.values, dtype=column.dtype))))


@dataclass(frozen=True)
class Ship:
    """Rows of `channel` for slot `slot` of instance `instance` at site `target`."""

    target: str
    channel: str
    instance: int
    slot: int
    rows: Rows


@dataclass(frozen=True)
class Mark:
    """Watermark of `channel` for site `target`."""

    target: str
    channel: str
    watermark: int


@dataclass
class StepOutput:
    ships: list[Ship]
    marks: list[Mark]
    results: list[Rows]  # rows of final instances (the query's result)


class InstanceJoin:
    """One instance's MJoin over its slots, each slot one MJoin input stream, plus the base-window check."""

    def __init__(self, plan: ExecutionPlan, inst: Instance) -> None:
        self.plan = plan
        self.inst = inst
        self.window_ms = plan.window_ms
        streams = {}
        for k, slot in enumerate(inst.slots):
            streams[f"i{k}"] = {"timestamp": TS, "fields": row_columns(plan, slot.mask)}
        preds = []
        for c in range(len(plan.classes)):
            holders = [k for k, slot in enumerate(inst.slots) if _has_class(plan, c, slot.mask)]
            for k in holders[1:]:
                left = f"i{holders[0]}.{class_column(plan, c, inst.slots[holders[0]].mask)}"
                right = f"i{k}.{class_column(plan, c, inst.slots[k].mask)}"
                preds.append({"op": "eq", "left": left, "right": right})
        spec = parse_spec(
            {
                "window": {"kind": "time", "size_ms": plan.window_ms},
                "allowed_lateness_ms": 0,
                "streams": streams,
                "tasks": [{"name": "j", "join": list(streams), "on": preds}],
            }
        )
        self.mjoin = MJoin(spec)
        self.combinations = 0  # found by MJoin, before the base-window check
        self.emitted = 0

    def process(self, slots: Mapping[int, Rows]) -> Rows:
        """Join rows of the slots (every row within a slot in ts order); returns the new combinations."""
        present = [k for k, rows in slots.items() if n_rows(rows)]
        ts = np.concatenate([slots[k][TS] for k in present])
        owner = np.repeat(np.arange(len(present)), [n_rows(slots[k]) for k in present])
        by_time = np.lexsort((owner, ts))  # stable: within a slot rows keep their order
        position = np.empty(len(ts), dtype=np.int64)
        position[by_time] = np.arange(len(ts))
        chunk, start = {}, 0
        for k in present:
            n = n_rows(slots[k])
            chunk[f"i{k}"] = Arrivals(dict(slots[k]), position[start : start + n])
            start += n
        result = self.mjoin.process(chunk)
        late = {s: len(r) for s, r in result.late.items() if len(r)}
        if late:
            raise AssertionError(f"instance {self.inst.id}: rows arrived out of event-time order: {late}")
        [combos] = result.pairs
        self.combinations += len(combos)
        out: Rows = {}
        for k, slot in enumerate(self.inst.slots):
            side = combos.sides[f"i{k}"]
            for name in row_columns(self.plan, slot.mask):
                out[name] = np.asarray(side[name])
        base_ts = np.array([out[f"c{b}_ts"] for b in bits(self.inst.mask)], dtype=np.int64).reshape(
            len(bits(self.inst.mask)), len(combos)
        )
        newest = base_ts.max(axis=0) if len(combos) else np.zeros(0, dtype=np.int64)
        oldest = base_ts.min(axis=0) if len(combos) else np.zeros(0, dtype=np.int64)
        out[TS] = newest
        keep = np.flatnonzero(newest - oldest <= self.window_ms)
        self.emitted += len(keep)
        return take(out, keep)


def _has_class(plan: ExecutionPlan, c: int, mask: int) -> bool:
    names = [s.name for s in plan.streams]
    return any(mask >> names.index(m) & 1 for m in plan.classes[c].members)


class SiteEngine:
    """The instances of one site, their input buffers and the watermarks of every channel they read or write."""

    def __init__(self, plan: ExecutionPlan, site: str) -> None:
        if site not in plan.sites:
            raise ValueError(f"site {site!r} is not in the plan (sites: {list(plan.sites)})")
        self.plan = plan
        self.site = site
        self.instances = [i for i in plan.instances if i.site == site]  # children before parents (compile order)
        self.sources = [s.name for s in plan.streams if s.site == site]
        self.joins = {i.id: InstanceJoin(plan, i) for i in self.instances}
        self.buffers: dict[tuple[int, int], list[Rows]] = {
            (i.id, k): [] for i in self.instances for k in range(len(i.slots))
        }
        self.watermarks: dict[str, int] = {}
        self.done_upto = {i.id: BEFORE for i in self.instances}
        self._sent: dict[tuple[str, str], int] = {}
        self._out = StepOutput([], [], [])
        self.produced = [f"src:{s}" for s in self.sources] + [i.channel for i in self.instances]

    def watermark(self, channel: str) -> int:
        return self.watermarks.get(channel, BEFORE)

    def source(self, stream: str, rows: Rows, watermark: int) -> None:
        """Rows read from local source `stream` (in ts order), and its watermark after them."""
        if stream not in self.sources:
            raise ValueError(f"stream {stream!r} is not a source of site {self.site!r} (its sources: {self.sources})")
        channel = f"src:{stream}"
        if n_rows(rows):
            self._route(channel, rows)
        self.watermarks[channel] = max(self.watermark(channel), watermark)

    def receive(self, channel: str, instance: int, slot: int, rows: Rows) -> None:
        """Rows shipped here by another site for one slot of a local instance."""
        inst = self.plan.instance(instance)
        if inst.site != self.site:
            raise ValueError(f"rows for instance {instance} of site {inst.site!r} arrived at {self.site!r}")
        if n_rows(rows):
            self.buffers[(instance, slot)].append(rows)

    def remote_watermark(self, channel: str, watermark: int) -> None:
        self.watermarks[channel] = max(self.watermark(channel), watermark)

    def step(self) -> StepOutput:
        """Run every instance whose input watermark advanced (repeatedly: local outputs feed local parents)."""
        progressed = True
        while progressed:
            progressed = False
            for inst in self.instances:
                progressed |= self._advance(inst)
        for channel in self.produced:
            wm = self.watermark(channel)
            for target in dict.fromkeys(i.site for i, _, _ in self.plan.consumers(channel) if i.site != self.site):
                if self._sent.get((target, channel), BEFORE) < wm:
                    self._sent[(target, channel)] = wm
                    self._out.marks.append(Mark(target, channel, wm))
        out, self._out = self._out, StepOutput([], [], [])
        return out

    @property
    def finished(self) -> bool:
        """Every local source and instance has ended (and `step` has announced it)."""
        ended = all(self.watermark(c) >= END for c in self.produced)
        announced = all(
            self._sent.get((i.site, c), BEFORE) >= END
            for c in self.produced
            for i, _, _ in self.plan.consumers(c)
            if i.site != self.site
        )
        return ended and announced

    def _advance(self, inst: Instance) -> bool:
        wm = min(self.watermark(f.channel) for slot in inst.slots for f in slot.feeds)
        if wm <= self.done_upto[inst.id]:
            return False
        ready: dict[int, Rows] = {}
        for k in range(len(inst.slots)):
            parts = self.buffers[(inst.id, k)]
            if not parts:
                continue
            rows = concat(parts)
            due = rows[TS] <= wm
            ready[k] = take(rows, np.flatnonzero(due))
            rest = take(rows, np.flatnonzero(~due))
            self.buffers[(inst.id, k)] = [rest] if n_rows(rest) else []
        if any(n_rows(r) for r in ready.values()):
            out = self.joins[inst.id].process(ready)
            if n_rows(out):
                if inst.final:
                    self._out.results.append(out)
                else:
                    self._route(inst.channel, out)
        self.done_upto[inst.id] = wm
        self.watermarks[inst.channel] = wm
        return True

    def _route(self, channel: str, rows: Rows) -> None:
        for inst, k, feed in self.plan.consumers(channel):
            chosen = select(self.plan, feed, rows)
            if not n_rows(chosen):
                continue
            if inst.site == self.site:
                self.buffers[(inst.id, k)].append(chosen)
            else:
                self._out.ships.append(Ship(inst.site, channel, inst.id, k, chosen))


def source_rows(plan: ExecutionPlan, b: int, columns: Mapping[str, np.ndarray]) -> Rows:
    """Rows of base stream b from event columns named as the events are (ts, id, attribute names)."""
    info = plan.streams[b]
    ts = np.asarray(columns["ts"], dtype=np.int64)
    rows: Rows = {f"c{b}_ts": ts, f"c{b}_id": np.asarray(columns["id"], dtype=np.int64)}
    for j, (attr, t) in enumerate(zip(info.attributes, info.types, strict=True)):
        rows[f"c{b}_a{j}"] = np.asarray(columns[attr], dtype=np.int64 if t == "int" else object)
    rows[TS] = ts
    return rows


def rows_to_records(plan: ExecutionPlan, mask: int, rows: Rows) -> list[dict[str, dict]]:
    """One record per row: {stream name: {ts, id, attributes...}} for every base stream of `mask`."""
    per_stream = []
    for b in bits(mask):
        info = plan.streams[b]
        names = ["ts", "id", *info.attributes]
        cols = [rows[f"c{b}_ts"].tolist(), rows[f"c{b}_id"].tolist()]
        cols += [rows[f"c{b}_a{j}"].tolist() for j in range(len(info.attributes))]
        per_stream.append((info.name, names, cols))
    out = []
    for r in range(n_rows(rows)):
        out.append(
            {name: {f: col[r] for f, col in zip(fields, cols, strict=True)} for name, fields, cols in per_stream}
        )
    return out


def records_to_rows(plan: ExecutionPlan, mask: int, records: list[Mapping[str, Mapping]]) -> Rows:
    """The inverse of `rows_to_records`."""
    rows: Rows = {}
    for b in bits(mask):
        info = plan.streams[b]
        subs = [r[info.name] for r in records]
        rows[f"c{b}_ts"] = np.array([s["ts"] for s in subs], dtype=np.int64)
        rows[f"c{b}_id"] = np.array([s["id"] for s in subs], dtype=np.int64)
        for j, (attr, t) in enumerate(zip(info.attributes, info.types, strict=True)):
            rows[f"c{b}_a{j}"] = np.array([s[attr] for s in subs], dtype=np.int64 if t == "int" else object)
    if not records:
        return empty_rows(plan, mask)
    rows[TS] = np.max([rows[f"c{b}_ts"] for b in bits(mask)], axis=0)
    return rows
