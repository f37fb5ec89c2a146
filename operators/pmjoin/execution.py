"""A plan tree compiled for execution on sites: join instances, the channels that feed them, the shipped edges.

Every `MJoin` of the plan (one per substream group inside a PMJoin) becomes an *instance* running at its node
(site). An instance has one input *slot* per child of its MJoin; a slot is fed by one or more *channels*:

* ``src:S`` — source stream S, read at its own site;
* ``op:K`` — the output of instance K (a combination of base tuples, one per stream of K).

A feed may carry a *filter*: inside a PMJoin group, only the tuples whose value on the PMJoin's equality class
lies in the group's values enter the group's plan. A feed whose channel is produced at another site than the
instance's is an *edge* that crosses sites; its predicted rate and planner-unit traffic (rate × tuple size, result
tuples sized as the plan's model says) come from the same model as `plan_cost`, so the edges add up to the plan's
cost. A slot fed by a PMJoin gets one feed per substream group (each group's root instance).

Instances whose output is the query's result are *final*: their output is not shipped (the planner does not count
it either). Pure data: no I/O; `to_dict`/`from_dict` carry it to the site processes as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from windjoin.operators.pmjoin.model import Query, RateModel, bits
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, PMJoin, plan_cost


class ExecutionError(ValueError):
    """A plan or query that the site execution cannot run (the message says what and why)."""


@dataclass(frozen=True)
class Feed:
    """One channel feeding a slot; `values` (of equality class `filter_class`) restrict it, if given."""

    channel: str
    mask: int
    site: str
    filter_class: int | None = None
    values: tuple[Any, ...] = ()
    predicted_rate: float = 0.0  # tuples/s arriving through this feed (model; restricted by the filter)
    predicted_units: float = 0.0  # planner units/s (rate × tuple size) if it crosses sites, else 0


@dataclass(frozen=True)
class Slot:
    mask: int
    feeds: tuple[Feed, ...]


@dataclass(frozen=True)
class Instance:
    """One MJoin at one site; its output is channel ``op:{id}``."""

    id: int
    site: str
    mask: int
    slots: tuple[Slot, ...]
    final: bool
    group: str  # which substream group it belongs to ("" outside PMJoins), for reports

    @property
    def channel(self) -> str:
        return f"op:{self.id}"


@dataclass(frozen=True)
class Edge:
    """A feed that crosses sites: `channel` produced at `source` is shipped to instance `instance` at `target`."""

    channel: str
    source: str
    target: str
    instance: int
    slot: int
    streams: tuple[str, ...]
    predicted_rate: float
    predicted_units: float


@dataclass(frozen=True)
class StreamInfo:
    """A source stream: its site, tuple size (planner units) and the attributes the query compares."""

    name: str
    site: str
    size: float
    attributes: tuple[str, ...]
    types: tuple[str, ...]  # "int" or "string", per attribute


@dataclass(frozen=True)
class ClassInfo:
    """An equality class: its member streams (names) and their attributes; `values` of a partitionable class."""

    name: str
    members: tuple[str, ...]
    attributes: tuple[str, ...]


@dataclass
class ExecutionPlan:
    sites: tuple[str, ...]
    window_ms: int
    sized_results: bool
    streams: tuple[StreamInfo, ...]
    classes: tuple[ClassInfo, ...]
    instances: tuple[Instance, ...]
    predicted_cost: float  # plan_cost of the plan: planner units (bytes/s at the STATS tuple sizes)
    _consumers: dict[str, list[tuple[Instance, int, Feed]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for inst in self.instances:
            for i, slot in enumerate(inst.slots):
                for feed in slot.feeds:
                    self._consumers.setdefault(feed.channel, []).append((inst, i, feed))

    def stream_names(self, mask: int) -> tuple[str, ...]:
        return tuple(self.streams[b].name for b in bits(mask))

    def size(self, mask: int) -> float:
        """Planner units per tuple of a (composite) stream: the sum (or max) of its base streams' sizes."""
        sizes = [self.streams[b].size for b in bits(mask)]
        return sum(sizes) if self.sized_results else max(sizes)

    def consumers(self, channel: str) -> list[tuple[Instance, int, Feed]]:
        """(instance, slot index, feed) for every slot that channel feeds."""
        return self._consumers.get(channel, [])

    def instance(self, ident: int) -> Instance:
        return self.instances[ident]

    def edges(self) -> list[Edge]:
        out = []
        for inst in self.instances:
            for i, slot in enumerate(inst.slots):
                for f in slot.feeds:
                    if f.site != inst.site:
                        names = self.stream_names(f.mask)
                        out.append(
                            Edge(f.channel, f.site, inst.site, inst.id, i, names, f.predicted_rate, f.predicted_units)
                        )
        return out

    def predicted_links(self) -> dict[str, float]:
        """Planner units/s per link ``"from->to"``."""
        links: dict[str, float] = {}
        for e in self.edges():
            key = f"{e.source}->{e.target}"
            links[key] = links.get(key, 0.0) + e.predicted_units
        return links

    def to_dict(self) -> dict[str, Any]:
        return {
            "sites": list(self.sites),
            "window_ms": self.window_ms,
            "sized_results": self.sized_results,
            "predicted_cost": self.predicted_cost,
            "streams": [
                {
                    "name": s.name,
                    "site": s.site,
                    "size": s.size,
                    "attributes": list(s.attributes),
                    "types": list(s.types),
                }
                for s in self.streams
            ],
            "classes": [
                {"name": c.name, "members": list(c.members), "attributes": list(c.attributes)} for c in self.classes
            ],
            "instances": [
                {
                    "id": inst.id,
                    "site": inst.site,
                    "mask": inst.mask,
                    "final": inst.final,
                    "group": inst.group,
                    "slots": [{"mask": slot.mask, "feeds": [_feed_dict(f) for f in slot.feeds]} for slot in inst.slots],
                }
                for inst in self.instances
            ],
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ExecutionPlan:
        instances = tuple(
            Instance(
                d["id"],
                d["site"],
                d["mask"],
                tuple(
                    Slot(s["mask"], tuple(Feed(**{**f, "values": tuple(f["values"])}) for f in s["feeds"]))
                    for s in d["slots"]
                ),
                d["final"],
                d["group"],
            )
            for d in data["instances"]
        )
        return ExecutionPlan(
            sites=tuple(data["sites"]),
            window_ms=int(data["window_ms"]),
            sized_results=bool(data["sized_results"]),
            streams=tuple(
                StreamInfo(s["name"], s["site"], s["size"], tuple(s["attributes"]), tuple(s["types"]))
                for s in data["streams"]
            ),
            classes=tuple(ClassInfo(c["name"], tuple(c["members"]), tuple(c["attributes"])) for c in data["classes"]),
            instances=instances,
            predicted_cost=float(data["predicted_cost"]),
        )


def _feed_dict(f: Feed) -> dict[str, Any]:
    return {
        "channel": f.channel,
        "mask": f.mask,
        "site": f.site,
        "filter_class": f.filter_class,
        "values": [v.item() if hasattr(v, "item") else v for v in f.values],
        "predicted_rate": f.predicted_rate,
        "predicted_units": f.predicted_units,
    }


def time_window_ms(windows_s: dict[str, float]) -> int:
    """The one time window (ms) every stream shares; sites run MJoin, whose window is one for all streams."""
    distinct = set(windows_s.values())
    if len(distinct) != 1:
        raise ExecutionError(
            f"streams.*.window: site execution needs one time window for every stream (got {windows_s}); "
            "MJoin applies a single window to all its inputs"
        )
    seconds = distinct.pop()
    ms = round(seconds * 1000)
    if ms <= 0 or abs(ms - seconds * 1000) > 1e-6:
        raise ExecutionError(f"streams.*.window.time: {seconds} s is not a positive whole number of milliseconds")
    return ms


def compile_plan(plan: Node, query: Query, window_ms: int) -> ExecutionPlan:
    """The instances, feeds and predicted edge traffic of `plan` (a planner output over `query`)."""
    if isinstance(plan, Input):
        raise ExecutionError("the plan is a single stream: there is nothing to join")
    compiler = _Compiler(query)
    root_feeds = compiler.node(plan, RateModel(query), None, {})
    final = {int(f.channel.split(":")[1]) for f in root_feeds}
    instances = tuple(
        Instance(i.id, i.site, i.mask, i.slots, i.id in final, i.group)
        for i in sorted(compiler.done, key=lambda x: x.id)
    )
    streams = tuple(_stream_info(query, b) for b in range(len(query.streams)))
    classes = tuple(
        ClassInfo(c.name, tuple(query.streams[m].name for m in c.members), c.attributes) for c in query.classes
    )
    return ExecutionPlan(
        sites=query.nodes,
        window_ms=window_ms,
        sized_results=query.sized_results,
        streams=streams,
        classes=classes,
        instances=instances,
        predicted_cost=plan_cost(plan, RateModel(query)),
    )


def _stream_info(query: Query, b: int) -> StreamInfo:
    """Stream b's compared attributes (first class naming each wins) and their value types."""
    types: dict[str, str] = {}
    for cls in query.classes:
        for member, attr in zip(cls.members, cls.attributes, strict=True):
            if member == b and attr not in types:
                integral = cls.values is None or np.issubdtype(cls.values.dtype, np.integer)
                types[attr] = "int" if integral else "string"
    s = query.streams[b]
    return StreamInfo(s.name, s.node, s.size, tuple(types), tuple(types.values()))


@dataclass
class _Pending:
    id: int
    site: str
    mask: int
    slots: tuple[Slot, ...]
    group: str


class _Compiler:
    def __init__(self, query: Query) -> None:
        self.query = query
        self.done: list[_Pending] = []

    def node(
        self,
        node: Node,
        model: RateModel,
        dest: str | None,
        leaves: dict[int, list[Feed]],
        group: str = "",
    ) -> list[Feed]:
        """Feeds delivering `node`'s output to a consumer at `dest` (None: not shipped), priced under `model`.

        `leaves` maps the mask of a PMJoin input to the feeds standing for it inside a group plan.
        """
        if isinstance(node, Input):
            base = leaves.get(node.mask)
            if base is None:
                if len(bits(node.mask)) != 1:
                    raise ExecutionError(f"input {node.mask:#b} is neither a source stream nor a PMJoin input")
                base = [Feed(f"src:{self.query.streams[bits(node.mask)[0]].name}", node.mask, node.site)]
            return [self._priced(f, model, dest) for f in base]
        if isinstance(node, MJoin):
            slots = tuple(Slot(c.mask, tuple(self.node(c, model, node.site, leaves, group))) for c in node.inputs)
            ident = len(self.done)
            self.done.append(_Pending(ident, node.site, node.mask, slots, group))
            return [self._priced(Feed(f"op:{ident}", node.mask, node.site), model, dest)]
        return self._pmjoin(node, model, dest, leaves)

    def _pmjoin(self, node: PMJoin, model: RateModel, dest: str | None, leaves: dict[int, list[Feed]]) -> list[Feed]:
        cls = self.query.classes[node.class_index]
        inner: dict[int, list[Feed]] = {}
        for child in node.inputs:
            if isinstance(child, PMJoin):
                raise ExecutionError("a PMJoin input is another PMJoin (constraint 1 of the paper)")
            feeds = self.node(child, model, child.site, leaves)
            inner[child.mask] = [Feed(f.channel, f.mask, f.site) for f in feeds]
        out = []
        for k, g in enumerate(node.groups):
            values = tuple(v.item() if hasattr(v, "item") else v for v in cls.values[g.values])
            restricted = {
                mask: [Feed(f.channel, f.mask, f.site, node.class_index, values) for f in feeds]
                for mask, feeds in inner.items()
            }
            label = f"{cls.name} group {k}"
            sub = model.restricted(node.class_index, np.asarray(g.values))
            out.extend(self.node(g.plan, sub, dest, restricted, label))
        return out

    def _priced(self, feed: Feed, model: RateModel, dest: str | None) -> Feed:
        rate = model.rate(feed.mask)
        units = model.traffic(feed.mask) if dest is not None and feed.site != dest else 0.0
        return Feed(feed.channel, feed.mask, feed.site, feed.filter_class, feed.values, rate, units)
