"""The STATS file of `windjoin plan`: validated once, into a `Query` and `PlannerOptions`.

Errors name the key, the bad value and what is accepted, one problem per line. The format is documented in
docs/pmjoin.md; in short:

    nodes: [n1, n2, n3]                      # optional: defaults to the nodes the streams name
    streams:
      S1:
        node: n1
        rate: 100.2                          # tuples/s; optional when an attribute's rates are absolute
        window: {time: 0.5}                  # seconds (W = rate × time), or {count: 1000} (W = count)
        size: 1                              # bytes per tuple (default 1)
        attributes:
          dest: {substreams: {a: 0.1, b: 0.1, c: 100}}          # rate per value (FStream rates)
          port: {histogram: [{from: 1, to: 1000, rate: 5.0}]}   # integer buckets, rate spread evenly
    joins:
      - equal: [S1.dest, S2.dest, S3.dest]   # priced from the value distributions
      - equal: [S3.port, S4.port]
        selectivity: 0.001                   # or an explicit selectivity (two members; not partitionable)
    result_size: sum                         # result tuple size: sum of inputs (default) or max
    planner:
      partitioning: {method: value, partitions: 3, seed: 0, group_planner: heuristic}
      optimal_max_streams: 10
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from windjoin.operators.pmjoin.model import EqualityClass, Query, Stream
from windjoin.operators.pmjoin.partition import METHODS
from windjoin.operators.pmjoin.planner import PlannerOptions
from windjoin.operators.pmjoin.pmjoin import Partitioning
from windjoin.operators.spec import KafkaSpec

MAX_DOMAIN = 2_000_000  # values per equality class once histograms are expanded to FStreams
NAME = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class StatsError(ValueError):
    """A STATS file that cannot be planned; the message lists every problem, one per line, by key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class WindowStats(_Strict):
    time: Positive | None = None
    count: Annotated[int, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _one(self) -> WindowStats:
        if (self.time is None) == (self.count is None):
            raise ValueError("give exactly one of time (seconds) or count (tuples)")
        return self


class Bucket(_Strict):
    lo: int = Field(alias="from")
    hi: int = Field(alias="to")
    rate: Rate

    @model_validator(mode="after")
    def _ordered(self) -> Bucket:
        if self.hi < self.lo:
            raise ValueError(f"to ({self.hi}) must be >= from ({self.lo})")
        return self


class AttributeStats(_Strict):
    substreams: dict[str | int, Rate] | None = None
    histogram: Annotated[list[Bucket], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one(self) -> AttributeStats:
        if (self.substreams is None) == (self.histogram is None):
            raise ValueError("give exactly one of substreams (rate per value) or histogram (buckets from/to/rate)")
        return self

    def total(self) -> float:
        if self.substreams is not None:
            return float(sum(self.substreams.values()))
        return float(sum(b.rate for b in self.histogram or []))


class StreamStats(_Strict):
    node: Annotated[str, Field(min_length=1)]
    rate: Positive | None = None
    window: WindowStats
    size: Positive = 1.0
    attributes: dict[Annotated[str, Field(pattern=NAME)], AttributeStats] = Field(default_factory=dict)


class JoinStats(_Strict):
    equal: Annotated[list[str], Field(min_length=2)]
    selectivity: Annotated[float, Field(gt=0, le=1)] | None = None


class PartitioningStats(_Strict):
    method: Literal["none", "value", "hash", "range", "rate"] = "value"
    partitions: Annotated[int, Field(ge=1)] = 1
    seed: int = 0
    group_planner: Literal["heuristic", "optimal"] = "heuristic"


class PlannerStats(_Strict):
    partitioning: PartitioningStats = Field(default_factory=PartitioningStats)
    optimal_max_streams: Annotated[int, Field(ge=0, le=14)] = 10


class StatsFile(_Strict):
    nodes: list[Annotated[str, Field(min_length=1)]] | None = None
    streams: Annotated[dict[Annotated[str, Field(pattern=NAME)], StreamStats], Field(min_length=1)]
    joins: list[JoinStats] = Field(default_factory=list)
    result_size: Literal["sum", "max"] = "sum"
    planner: PlannerStats = Field(default_factory=PlannerStats)
    # How the site runtime's Kafka clients connect (`windjoin sites run`): the join spec's `kafka:` section.
    kafka: KafkaSpec | None = None

    @model_validator(mode="after")
    def _cross_references(self) -> StatsFile:
        problems = []
        if self.nodes is not None:
            for name, s in self.streams.items():
                if s.node not in self.nodes:
                    problems.append(f"streams.{name}.node: {s.node!r} is not among nodes {self.nodes}")
        for name, s in self.streams.items():
            if s.rate is None:
                totals = {round(a.total(), 9) for a in s.attributes.values()}
                if len(totals) != 1:
                    problems.append(
                        f"streams.{name}.rate: missing; give it, or one attribute whose substream/histogram rates "
                        f"are absolute (tuples/s) (attribute totals: {sorted(totals)})"
                    )
            for attr, a in s.attributes.items():
                if a.total() <= 0:
                    problems.append(f"streams.{name}.attributes.{attr}: all rates are 0; at least one must be > 0")
        for k, join in enumerate(self.joins):
            problems.extend(self._check_join(k, join))
        if len(self.streams) > 1 and not problems:
            problems.extend(self._check_connected())
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _check_join(self, k: int, join: JoinStats) -> list[str]:
        out, seen = [], set()
        for ref in join.equal:
            stream, _, attr = ref.partition(".")
            where = f"joins[{k}].equal: {ref!r}"
            if not attr or stream not in self.streams:
                out.append(f"{where} must be STREAM.ATTRIBUTE with STREAM one of {sorted(self.streams)}")
                continue
            if stream in seen:
                out.append(f"{where}: stream {stream} appears twice in one equality")
            seen.add(stream)
            if join.selectivity is None and attr not in self.streams[stream].attributes:
                out.append(
                    f"{where}: streams.{stream}.attributes has no {attr!r} (substreams or histogram); "
                    f"give it, or a selectivity for this join"
                )
        if join.selectivity is not None and len(join.equal) != 2:
            out.append(f"joins[{k}].selectivity: an explicit selectivity joins exactly two attributes")
        return out

    def _check_connected(self) -> list[str]:
        names = list(self.streams)
        reached = {names[0]}
        groups = [{ref.partition(".")[0] for ref in j.equal} for j in self.joins]
        grew = True
        while grew:
            grew = False
            for g in groups:
                if g & reached and not g <= reached:
                    reached |= g
                    grew = True
        missing = [n for n in names if n not in reached]
        if missing:
            return [f"joins: streams {missing} are not joined to {names[0]} (the join graph must be connected)"]
        return []


def parse_stats_file(data: Any) -> StatsFile:
    """Validate parsed YAML into the STATS model, or raise StatsError naming every bad key."""
    if not isinstance(data, dict):
        raise StatsError(f"<top level>: STATS is a mapping with keys streams, joins (got {type(data).__name__})")
    try:
        return StatsFile.model_validate(data)
    except ValidationError as err:
        raise StatsError(_format_errors(err)) from None


def parse_stats(data: Any) -> tuple[Query, PlannerOptions]:
    """Validate parsed YAML into the query and the planner options, or raise StatsError naming every bad key."""
    stats = parse_stats_file(data)
    try:
        return to_query(stats), to_options(stats)
    except ValueError as err:
        raise StatsError(str(err)) from None


def load_stats(path: str | Path) -> tuple[Query, PlannerOptions]:
    """Read and validate a STATS YAML file."""
    stats = load_stats_file(path)
    try:
        return to_query(stats), to_options(stats)
    except ValueError as err:
        raise StatsError(f"{path}: invalid STATS:\n{err}") from None


def load_stats_file(path: str | Path) -> StatsFile:
    """Read and validate a STATS YAML file into its model (the query's sections and the `kafka:` section)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise StatsError(f"{path}: cannot read the STATS file ({err.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise StatsError(f"{path}: not valid YAML: {err}") from None
    try:
        return parse_stats_file(data)
    except StatsError as err:
        raise StatsError(f"{path}: invalid STATS:\n{err}") from None


def to_options(stats: StatsFile) -> PlannerOptions:
    p = stats.planner.partitioning
    assert p.method in METHODS
    how = Partitioning(p.method, p.partitions, p.seed, p.group_planner)
    return PlannerOptions(how, stats.planner.optimal_max_streams)


def to_query(stats: StatsFile) -> Query:
    names = list(stats.streams)
    streams = []
    for name, s in stats.streams.items():
        rate = s.rate if s.rate is not None else next(iter(s.attributes.values())).total()
        window = rate * s.window.time if s.window.time is not None else float(s.window.count)
        streams.append(Stream(name, s.node, float(rate), float(window), float(s.size)))
    classes = []
    for k, join in enumerate(stats.joins):
        refs = [ref.partition(".") for ref in join.equal]
        members = tuple(names.index(stream) for stream, _, _ in refs)
        attrs = tuple(attr for _, _, attr in refs)
        label = " = ".join(join.equal)
        if join.selectivity is not None:
            classes.append(EqualityClass(label, members, attrs, selectivity=join.selectivity))
            continue
        dists = [_fstream_rates(stats.streams[stream].attributes[attr]) for stream, _, attr in refs]
        values, weights = _align(dists, f"joins[{k}]")
        classes.append(EqualityClass(label, members, attrs, values, weights))
    nodes = tuple(stats.nodes) if stats.nodes is not None else tuple(dict.fromkeys(s.node for s in streams))
    return Query(tuple(streams), nodes, tuple(classes), sized_results=stats.result_size == "sum")


def _fstream_rates(a: AttributeStats) -> dict[Any, float]:
    """Rate per value: given directly, or estimated from a histogram bucket spread evenly over its values."""
    if a.substreams is not None:
        return {k: float(v) for k, v in a.substreams.items()}
    out: dict[Any, float] = {}
    for b in a.histogram or []:
        width = b.hi - b.lo + 1
        if width > MAX_DOMAIN:
            raise ValueError(f"histogram bucket from {b.lo} to {b.hi}: more than {MAX_DOMAIN} values")
        for v in range(b.lo, b.hi + 1):
            out[v] = out.get(v, 0.0) + b.rate / width
    return out


def _align(dists: list[dict[Any, float]], where: str) -> tuple[np.ndarray, np.ndarray]:
    """One sorted value domain for a class, and each member's normalized distribution over it."""
    keys = set().union(*dists)
    if len(keys) > MAX_DOMAIN:
        raise ValueError(f"{where}: {len(keys)} distinct values, more than {MAX_DOMAIN}")
    if all(isinstance(k, int) for k in keys):
        values = np.array(sorted(keys), dtype=np.int64)
        lookup = {int(v): i for i, v in enumerate(values)}
    else:  # mixed or string values compare as strings
        values = np.array(sorted({str(k) for k in keys}), dtype=object)
        lookup = {v: i for i, v in enumerate(values)}
    weights = np.zeros((len(dists), len(values)))
    for r, d in enumerate(dists):
        for k, rate in d.items():
            weights[r, lookup[k if values.dtype != object else str(k)]] += rate
        weights[r] /= weights[r].sum()
    if not np.isfinite(weights).all() or math.isclose(float(weights.sum()), 0.0):
        raise ValueError(f"{where}: value distributions could not be normalized")
    return values, weights


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in e["loc"] if not _is_label(p))
        loc = loc.replace(".[", "[") or "<top level>"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error" and not e["loc"]:
            lines.extend(msg.split("\n"))
            continue
        got = "" if e["type"] in ("missing", "value_error") else f" (got {e['input']!r})"
        if e["type"] == "extra_forbidden":
            got += f"; accepted keys: {', '.join(_accepted_keys(e['loc'][:-1]))}"
        lines.append(f"{loc}: {msg}{got}")
    return "\n".join(lines)


def _accepted_keys(parent: tuple[Any, ...]) -> list[str]:
    """The keys allowed where an unknown key was found (streams.<name> and list positions are wildcards)."""
    shape: list[Any] = []
    for i, part in enumerate(parent):
        if isinstance(part, int):
            shape.append(int)
        elif i > 0 and parent[i - 1] in ("streams", "attributes"):
            shape.append("*")
        elif not _is_label(part):
            shape.append(part)
    models: dict[tuple[Any, ...], type[BaseModel]] = {
        (): StatsFile,
        ("streams", "*"): StreamStats,
        ("streams", "*", "window"): WindowStats,
        ("streams", "*", "attributes", "*"): AttributeStats,
        ("streams", "*", "attributes", "*", "histogram", int): Bucket,
        ("joins", int): JoinStats,
        ("planner",): PlannerStats,
        ("planner", "partitioning"): PartitioningStats,
    }
    model = models.get(tuple(shape))
    if model is None:
        return ["?"]
    return [f.alias or name for name, f in model.model_fields.items()]


def _is_label(part: Any) -> bool:
    return isinstance(part, str) and (part.startswith("function-") or part in ("str", "int"))
