"""The join spec: typed, validated once at the edge, with errors that name the key, the value and what is accepted."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from windjoin.operators.delta_sink_config import DeltaSinkSpec
from windjoin.operators.kafka_sink_spec import KafkaSinkSpec
from windjoin.operators.predicate_ops import op_named, op_names
from windjoin.operators.results_url import check_results_url
from windjoin.operators.sink_configs import register_sink_config, sink_config_model, sink_kinds
from windjoin.operators.spec_numbers import Millis, PositiveBytes, PositiveCount, PositiveMillis, Width
from windjoin.operators.task_graph import components
from windjoin.operators.url_secrets import secret_query_keys
from windjoin.operators.windows import Window
from windjoin.operators.windows.count import CountWindow  # noqa: F401 - the kinds by their old address
from windjoin.operators.windows.registry import kind_names
from windjoin.operators.windows.time import TimeWindow

IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
FieldType = Literal["int", "float", "string", "bool"]
RESERVED_STREAM_NAMES = ("task", "stream")


class _Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2 booleans: only true/false, so a task's `on:` key stays the string "on" (YAML 1.1 made it True)."""


_BOOL = "tag:yaml.org,2002:bool"
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class SpecError(ValueError):
    """A join spec that cannot be used; the message lists every problem, one per line, by key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


TOPIC = r"^[A-Za-z0-9._-]{1,249}$"  # Kafka's legal topic names
SUBJECT = r"^[A-Za-z0-9._:-]{1,255}$"  # a schema registry subject (topic names and `-value`/`-key` suffixes)


class StreamSpec(_Strict):
    timestamp: Annotated[str, Field(pattern=IDENTIFIER)] = "ts"
    fields: dict[Annotated[str, Field(pattern=IDENTIFIER)], FieldType]
    # Where the stream comes from when running on Kafka (join-file needs none of these).
    topic: Annotated[str, Field(pattern=TOPIC)] | None = None
    format: Literal["json", "avro"] = "json"
    schema_file: str | None = Field(default=None, alias="schema", min_length=1)  # .avsc, relative to the spec
    schema_id: Annotated[int, Field(strict=True, ge=0, lt=2**31)] | None = None
    # With a schema registry: the subject its producers register the schema under (default `<topic>-value`).
    subject: Annotated[str, Field(pattern=SUBJECT)] | None = None
    key: Annotated[str, Field(pattern=IDENTIFIER)] | None = None  # partitioning field; none: one partition

    def field_type(self, name: str) -> str | None:
        """The type of a field; the timestamp is an int field (epoch milliseconds)."""
        return "int" if name == self.timestamp else self.fields.get(name)


class PredicateSpec(_Strict):
    op: str  # a registered predicate op (operators/predicate_ops/)
    left: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")]
    right: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")]
    width: Width | None = None

    @field_validator("op")
    @classmethod
    def _registered(cls, op: str) -> str:
        if op not in op_names():
            raise ValueError(f"unknown op {op!r} (accepted: {op_names()})")
        return op

    @property
    def left_ref(self) -> tuple[str, str]:
        stream, field = self.left.split(".")
        return stream, field

    @property
    def right_ref(self) -> tuple[str, str]:
        stream, field = self.right.split(".")
        return stream, field


JoinType = Literal["inner", "left", "right", "full", "semi", "anti", "asof", "asof_left"]
AS_OF_TYPES = ("asof", "asof_left")


class TaskSpec(_Strict):
    name: Annotated[str, Field(pattern=IDENTIFIER)]
    join: Annotated[list[Annotated[str, Field(pattern=IDENTIFIER)]], Field(min_length=2)]  # 3+: MJoin
    on: list[PredicateSpec] = []
    window: TimeWindow | None = None  # this task's own bounds (two-stream tasks, time windows); none: the spec's
    # What a two-stream task emits (`join: [left, right]`): pairs (inner), also each tuple that never paired, with
    # nulls, once it can no longer pair (left, right, full), each left tuple at its first pair alone (semi), or each
    # left tuple that never paired, once it can no longer pair (anti); or each left tuple with the right tuple valid
    # at its time (as-of: the latest at or before it with equal keys), alone if none (asof_left) or not (asof).
    type: JoinType = "inner"
    max_age_ms: Millis | None = None  # as-of: a version older than this is no version

    @property
    def tracked(self) -> tuple[str, ...]:
        """The joined streams whose tuples' "paired yet" this task remembers (none for inner)."""
        left, right = self.join[0], self.join[-1]
        return {"inner": (), "right": (right,), "full": (left, right), "asof": (), "asof_left": ()}.get(
            self.type, (left,)
        )


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class RedisSinkSpec(_Strict):
    # The server only (never a password): credentials come from the keys below or WINDJOIN_REDIS_* variables.
    url: Annotated[str, Field(pattern=r"^rediss?://")] = "redis://127.0.0.1:6379/0"
    username: Annotated[str, Field(min_length=1)] | None = None
    password_file: Annotated[str, Field(min_length=1)] | None = None  # a mounted Secret's file
    password_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None  # the name of a variable holding it
    ca_file: Annotated[str, Field(min_length=1)] | None = None  # the CA of a rediss:// server
    retain_ms: PositiveMillis = 600_000
    feed_batches: PositiveCount = 10_000  # batches the continuous-query feed keeps
    max_bytes: PositiveBytes = 256 << 20  # compressed result bytes Redis keeps at most (about)

    @model_validator(mode="after")
    def _one_password_source(self) -> RedisSinkSpec:
        if "@" in self.url.split("/")[2]:
            raise ValueError(
                "url: holds credentials; give the server only (redis://host:port/db) and the password by "
                "password_file or password_env"
            )
        secret = secret_query_keys(self.url)
        if secret:  # redis-py logs in with ?password=
            raise ValueError(
                f"url: holds credentials in its query ({', '.join(secret)}); give the server only "
                "(redis://host:port/db, other query options accepted) and the password by password_file or password_env"
            )
        if self.password_file and self.password_env:
            raise ValueError("password_file and password_env: give one of them, not both")
        if self.ca_file and not self.url.startswith("rediss://"):
            raise ValueError(f"ca_file: needs a rediss:// (TLS) url, got {self.url!r}")
        return self


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaSpec(_Strict):
    """How every Kafka client of the job connects: TLS and/or SASL, credentials from a file or a variable."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: Annotated[str, Field(min_length=1)] | None = None
    password_file: Annotated[str, Field(min_length=1)] | None = None
    password_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    ca_file: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSpec:
        problems = []
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism is None:
                problems.append(
                    f"sasl_mechanism: required with {self.security_protocol} (one of {list(SASL_MECHANISMS)})"
                )
            if self.username is None:
                problems.append(f"username: required with {self.security_protocol}")
            if (self.password_file is None) == (self.password_env is None):
                problems.append(f"password_file or password_env: exactly one is required with {self.security_protocol}")
        else:
            given = [k for k in ("sasl_mechanism", "username", "password_file", "password_env") if getattr(self, k)]
            if given:
                problems.append(
                    f"{', '.join(given)}: only used with security_protocol SASL_PLAINTEXT or SASL_SSL "
                    f"(got {self.security_protocol})"
                )
        if self.ca_file is not None and not self.security_protocol.endswith("SSL"):
            problems.append(f"ca_file: only used with security_protocol SSL or SASL_SSL (got {self.security_protocol})")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class SchemaRegistrySpec(_Strict):
    """A schema registry (Confluent's REST API) for the Avro streams: decoders fetch writer schemas by id,
    producers register theirs. Credentials from a file or a variable, never here."""

    url: Annotated[str, Field(pattern=r"^https?://[^\s/@,]+(/[^\s@,]*)?$")]  # no credentials in the URL
    username: Annotated[str, Field(min_length=1)] | None = None
    password_file: Annotated[str, Field(min_length=1)] | None = None
    password_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    ca_file: Annotated[str, Field(min_length=1)] | None = None  # a CA bundle to verify an https registry
    timeout_s: Annotated[float, Field(strict=True, gt=0, le=120, allow_inf_nan=False)] = 10.0  # each request

    @model_validator(mode="after")
    def _consistent(self) -> SchemaRegistrySpec:
        has_password = self.password_file is not None or self.password_env is not None
        if self.username is not None and (self.password_file is None) == (self.password_env is None):
            raise ValueError("password_file or password_env: exactly one is required with username")
        if self.username is None and has_password:
            raise ValueError("username: required with password_file or password_env")
        if self.ca_file is not None and not self.url.startswith("https://"):
            raise ValueError(f"ca_file: only used with an https:// url (got {self.url})")
        return self


class PunctuationSpec(_Strict):
    """A record of `stream` whose `field` equals `value` closes a snapshot of every task (it is not joined)."""

    stream: Annotated[str, Field(pattern=IDENTIFIER)]
    field: Annotated[str, Field(pattern=IDENTIFIER)]
    value: Any  # checked against the field's type with the cross references (an error names the type)


class SnapshotsSpec(_Strict):
    every_ms: PositiveMillis = 60_000  # periodic policy: wall clock since the task's last snapshot
    punctuation: PunctuationSpec | None = None


class ParquetSinkSpec(_Strict):
    path: Annotated[str, Field(min_length=1)]  # a folder, or an object store's URL (s3://bucket/prefix)
    # Keep snapshots whose max result time is within retain_ms of the latest; null: keep everything.
    retain_ms: PositiveMillis | None = None
    snapshots: SnapshotsSpec = SnapshotsSpec()

    @field_validator("path")
    @classmethod
    def _no_credentials(cls, path: str) -> str:
        return check_results_url(path, "sinks.parquet.path")


register_sink_config("parquet", ParquetSinkSpec)
register_sink_config("redis", RedisSinkSpec)
register_sink_config("delta", DeltaSinkSpec)
register_sink_config("kafka", KafkaSinkSpec)


class SinksSpec(_Strict):
    """The sinks by kind: parquet and redis as typed fields, any other registered kind (`operators.sink_configs`)
    as an extra key validated by its model."""

    model_config = ConfigDict(extra="allow", frozen=True)

    redis: RedisSinkSpec | None = None
    parquet: ParquetSinkSpec | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _registered_kinds(cls, data: Any, handler: ModelWrapValidatorHandler[SinksSpec]) -> SinksSpec:
        """Each extra key validated by its kind's model; every error located at `sinks.<kind>...` like the fields'."""
        if not isinstance(data, dict):
            return handler(data)
        out, errors = dict(data), []
        for kind, value in data.items():
            if kind in cls.model_fields:
                continue
            try:
                out[kind] = sink_config_model(kind).model_validate(value)
            except ValidationError as err:
                errors += _error_details(err, kind)
            except ValueError as err:  # an unknown kind: the message names the registered ones
                errors.append(InitErrorDetails(type="value_error", loc=(kind,), input=value, ctx={"error": err}))
        try:
            sinks = handler(out)
        except ValidationError as err:
            errors = _error_details(err) + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return sinks

    def configured(self) -> dict[str, BaseModel]:
        """Each configured sink's config by kind, in the kinds' registration order."""
        given = {name: getattr(self, name) for name in type(self).model_fields} | (self.model_extra or {})
        return {kind: given[kind] for kind in sink_kinds() if given.get(kind) is not None}


DEFAULT_MAX_OFFSETS_PER_TRIGGER = 100_000


class JoinSpec(_Strict):
    window: Window
    allowed_lateness_ms: Millis = 0
    streams: Annotated[dict[Annotated[str, Field(pattern=IDENTIFIER)], StreamSpec], Field(min_length=2)]
    tasks: Annotated[list[TaskSpec], Field(min_length=1)]
    # Running on Kafka and Spark.
    partitions: Annotated[int, Field(strict=True, ge=1, le=65536)] = 64
    slots: Annotated[int, Field(strict=True, ge=1, le=4096)] = 2
    trigger_ms: Millis = 1000
    # Records per micro-batch at most, over all input partitions: a backlog is caught up in batches that fit the
    # driver's and executors' memory (null: everything available, for bounded runs over small inputs only).
    max_offsets_per_trigger: PositiveCount | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    # Production delay to stay under: batches are sized from their measured fixed and per-record costs
    # (operators.batch_size), growing only while behind (null: batches take up to max_offsets_per_trigger).
    latency_target_ms: PositiveMillis | None = None
    # Event time per input partition (time windows): a Kafka partition read to its end whose end has not moved
    # for this long stops holding the watermark back; and while catching up, no partition is read further than
    # `alignment_ms` ahead of the slowest in event time (null: no alignment), so state stays bounded.
    idle_timeout_ms: Millis = 10_000
    alignment_ms: Millis | None = 10_000
    # Results of a batch as the sinks get them (SplitJoin's ordering levels): "none" as the slots produced them,
    # "outer" by result time (the later tuple's), "strict" by result time then the earlier tuples' times.
    output_order: Literal["none", "outer", "strict"] = "none"
    checkpoint: Annotated[str, Field(min_length=1)] | None = None
    sinks: SinksSpec = SinksSpec()
    kafka: KafkaSpec = KafkaSpec()
    schema_registry: SchemaRegistrySpec | None = None
    dead_letter_topic: Annotated[str, Field(pattern=TOPIC)] | None = None
    # A record whose event time runs further ahead of its Kafka record time is refused (`future_timestamp`):
    # one bad clock must not push a partition's event time forward and make every later tuple late.
    max_future_ms: Millis | None = 86_400_000
    base_dir: str = Field(default=".", exclude=True)  # the spec file's folder: relative schema paths start here

    @model_validator(mode="after")
    def _cross_references(self) -> JoinSpec:
        problems = [*self._stream_problems(), *self._task_problems(), *self._punctuation_problems()]
        problems += self._retention_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _stream_problems(self) -> list[str]:
        problems = []
        if self.slots > self.partitions:
            problems.append(f"slots: {self.slots} slots for {self.partitions} partitions; slots must be <= partitions")
        for name, stream in self.streams.items():
            if stream.key is not None and stream.field_type(stream.key) is None:
                known = [stream.timestamp, *stream.fields]
                problems.append(f"streams.{name}.key: no field {stream.key!r} (one of {known})")
            problems += self._avro_problems(name, stream)
            if name in RESERVED_STREAM_NAMES:
                problems.append(f"streams.{name}: the name is reserved (not one of {list(RESERVED_STREAM_NAMES)})")
            if stream.timestamp in stream.fields:
                problems.append(
                    f"streams.{name}.fields.{stream.timestamp}: the timestamp field is implicit (int epoch ms); "
                    "do not list it among the fields"
                )
        return problems

    def _avro_problems(self, name: str, stream: StreamSpec) -> list[str]:
        if stream.format != "avro":
            given = [key for key in ("schema_file", "schema_id", "subject") if getattr(stream, key) is not None]
            return [f"streams.{name}.{key.removesuffix('_file')}: only used with format 'avro'" for key in given]
        if self.schema_registry is None:
            if stream.schema_file is None:
                return [f"streams.{name}.schema: format 'avro' needs a schema file (.avsc) or a schema_registry"]
            if stream.subject is not None:
                return [f"streams.{name}.subject: only used with a schema_registry"]
        elif stream.schema_id is not None:
            return [f"streams.{name}.schema_id: not used with a schema_registry (the registry assigns ids)"]
        return []

    def _task_problems(self) -> list[str]:
        problems = []
        seen: set[str] = set()
        for i, task in enumerate(self.tasks):
            where = f"tasks[{i}]"
            if task.name in seen:
                problems.append(f"{where}.name: {task.name!r} is used by another task; task names must be unique")
            seen.add(task.name)
            unknown = [s for s in task.join if s not in self.streams]
            if unknown:
                problems.append(f"{where}.join: unknown stream(s) {unknown}; declared streams: {list(self.streams)}")
                continue
            repeated = sorted({s for s in task.join if task.join.count(s) > 1})
            if repeated:
                problems.append(f"{where}.join: {task.join} joins a stream with itself ({repeated}); name each once")
                continue
            pred_problems = [
                p for j, pred in enumerate(task.on) for p in self._predicate_problems(f"{where}.on[{j}]", task, pred)
            ]
            problems.extend(pred_problems)
            if not pred_problems:
                problems.extend(self._connection_problems(where, task))
            problems.extend(self._partitioning_problems(where, task))
            problems.extend(self._window_problems(where, task))
            problems.extend(self._asof_problems(where, task))
        wide = [t.name for t in self.tasks if len(t.join) > 2]
        problems += [
            f"tasks[{i}].type: {task.type!r} cannot share a spec with tasks of three or more streams ({wide}): they "
            "all run on one n-way join, which emits whole combinations only"
            for i, task in enumerate(self.tasks)
            if wide and len(task.join) == 2 and task.type != "inner"
        ]
        return problems

    def _window_problems(self, where: str, task: TaskSpec) -> list[str]:
        """A task's own bounds need a kind that takes them; n-way tasks join within the spec's symmetric window."""
        kind = self.window.kind
        if task.window is not None and not self.window.task_bounds:
            return [f"{where}.window: a task's own bounds need the spec's window to be a time window (got kind {kind})"]
        if len(task.join) <= 2:
            return []
        if not self.window.n_way:
            return [f"{where}.join: tasks of three or more streams need a time or count window (got kind {kind})"]
        if task.type != "inner":
            return [f"{where}.type: {task.type!r} joins two streams; tasks of three or more streams are 'inner'"]
        if task.window is not None:
            return [f"{where}.window: tasks of three or more streams join within the spec's window; remove it"]
        if self.window.event_time and self.window.bounds[0] != -self.window.bounds[1]:
            return [
                f"{where}.join: tasks of three or more streams need a symmetric window (size_ms); lower_ms/upper_ms "
                "bound two-stream tasks only"
            ]
        return []

    def _asof_problems(self, where: str, task: TaskSpec) -> list[str]:
        """An as-of task matches versions by equalities alone, over event time, unbounded by the window."""
        if task.type not in AS_OF_TYPES:
            return [f"{where}.max_age_ms: only used with type asof or asof_left"] if task.max_age_ms is not None else []
        problems = []
        if self.window.kind != "time":
            problems.append(
                f"{where}.type: {task.type!r} needs a time window (window.kind: time; got {self.window.kind}): "
                "versions are matched by event time"
            )
        if task.window is not None:
            problems.append(
                f"{where}.window: an as-of task is not bounded by a window; remove it (max_age_ms bounds "
                "how old a version may be)"
            )
        problems += [
            f"{where}.on[{j}].op: an as-of task finds versions by equalities (eq) only; {p.op!r} is not supported "
            "yet (accepted: eq)"
            for j, p in enumerate(task.on)
            if p.op != "eq"
        ]
        return problems

    def bounds(self, task: TaskSpec) -> tuple[int, int]:
        """An event-time task's (lower, upper) on second.ts - first.ts: its own window's, else the spec's."""
        return (task.window or self.window).bounds

    def history_ms(self, stream: str) -> int:
        """How far below the watermark a stored tuple of `stream` may still pair with a later tuple (time windows):
        the most any task lets a partner's event time fall above its own, at least 0."""
        reach = [0]
        for task in self.tasks:
            if stream in task.join and task.type not in AS_OF_TYPES:  # as-of tasks keep versions of their own
                second = len(task.join) == 2 and stream == task.join[1]
                reach.append(self.window.history_ms(self.bounds(task), second))
        return max(reach)

    def recall_history_ms(self, stream: str) -> int:
        """`history_ms`, and for a partner of an outer, semi or anti task at least the task's span (upper - lower):
        a stored partner then stays while every tuple it paired with can still close, so whether a tuple paired can
        be worked out again from the stored tuples alone (`WindowJoin.recall_flags`, a window rebuilt from state)."""
        spans = [self.history_ms(stream)]
        for task in self.tasks:
            if len(task.join) != 2 or stream not in task.join:
                continue
            partner_of = task.join[1] if stream == task.join[0] else task.join[0]
            if partner_of in task.tracked:
                lower, upper = self.bounds(task)
                spans.append(upper - lower)
        return max(spans)

    @property
    def max_history_ms(self) -> int:
        """`recall_history_ms` over every joined stream: how long the streaming job keeps state that mixes the
        streams below the watermark (it rebuilds windows from that state, and recalls their flags from it)."""
        return max([self.recall_history_ms(s) for t in self.tasks for s in t.join], default=0)

    @property
    def tracking(self) -> bool:
        """Some task remembers which of its tuples paired (outer, semi, anti)."""
        return any(task.tracked for task in self.tasks)

    @property
    def reach_ms(self) -> int:
        """How far apart a result's event times may lie, either way (time windows)."""
        return max(max(-lower, upper) for lower, upper in (self.bounds(t) for t in self.tasks))

    def _retention_problems(self) -> list[str]:
        """Parquet keeps at least what Redis keeps, so a one-time query over the Redis span finds every snapshot."""
        parquet, redis = self.sinks.parquet, self.sinks.redis
        if parquet is None or redis is None or parquet.retain_ms is None or parquet.retain_ms >= redis.retain_ms:
            return []
        return [
            f"sinks.parquet.retain_ms: {parquet.retain_ms} is below sinks.redis.retain_ms ({redis.retain_ms}); "
            "accepted: null (keep every snapshot) or at least the Redis retention"
        ]

    def _punctuation_problems(self) -> list[str]:
        """The punctuation names a declared stream and field, and its value has the field's type."""
        parquet = self.sinks.parquet
        punct = parquet.snapshots.punctuation if parquet is not None else None
        if punct is None:
            return []
        where = "sinks.parquet.snapshots.punctuation"
        stream = self.streams.get(punct.stream)
        if stream is None:
            return [f"{where}.stream: unknown stream {punct.stream!r}; declared streams: {list(self.streams)}"]
        ftype = stream.field_type(punct.field)
        if ftype is None:
            known = [stream.timestamp, *stream.fields]
            return [f"{where}.field: stream {punct.stream!r} has no field {punct.field!r} (one of {known})"]
        if not _matches_type(punct.value, ftype):
            return [
                f"{where}.value: {punct.value!r} does not fit {punct.stream}.{punct.field} (type {ftype}) "
                f"(accepted: {_ACCEPTED_VALUES[ftype]})"
            ]
        return []

    def _connection_problems(self, where: str, task: TaskSpec) -> list[str]:
        """A task of 3+ streams needs predicates linking them all (2 streams may be a plain cross product)."""
        if len(task.join) <= 2:
            return []
        groups = components(task.join, ((p.left_ref[0], p.right_ref[0]) for p in task.on))
        if len(groups) == 1:
            return []
        return [
            f"{where}.on: the predicates leave the streams in separate groups {groups}; "
            "a task of three or more streams needs predicates linking every stream to the others"
        ]

    def _partitioning_problems(self, where: str, task: TaskSpec) -> list[str]:
        """Streams split by key must meet on it: `eq` between the keys links them all, or none is keyed."""
        keys = {s: self.streams[s].key for s in task.join}
        keyed = [s for s in task.join if keys[s] is not None]
        if not keyed:
            return []
        two = len(task.join) == 2
        if len(keyed) < len(task.join):
            who = f"only {keyed[0]!r} has" if len(keyed) == 1 else f"only {keyed} have"
            every, none = ("both streams", "neither") if two else ("every joined stream", "none")
            return [f"{where}.join: {who} a key; give {every} a key (joined by eq) or {none}"]
        key_of = {f"{s}.{k}": s for s, k in keys.items()}
        links = [
            (key_of[p.left], key_of[p.right])
            for p in task.on
            if op_named(p.op).equates and {p.left, p.right} <= set(key_of)
        ]
        groups = components(task.join, links)
        if len(groups) == 1:
            return []
        pair = " = ".join(sorted(f"{g[0]}.{keys[g[0]]}" for g in groups[:2]))
        need = "the predicate" if two else "eq predicates between the keys linking all the streams, e.g."
        return [f"{where}.on: the streams are partitioned by key; the task needs {need} eq {pair}"]

    def _predicate_problems(self, where: str, task: TaskSpec, pred: PredicateSpec) -> list[str]:
        problems = []
        types = []
        for side, (stream, field) in (("left", pred.left_ref), ("right", pred.right_ref)):
            if stream not in task.join:
                problems.append(f"{where}.{side}: stream {stream!r} is not joined by this task (one of {task.join})")
                continue
            ftype = self.streams[stream].field_type(field)
            if ftype is None:
                known = [self.streams[stream].timestamp, *self.streams[stream].fields]
                problems.append(f"{where}.{side}: stream {stream!r} has no field {field!r} (one of {known})")
                continue
            types.append(ftype)
        if problems:
            return problems
        if pred.left_ref[0] == pred.right_ref[0]:
            return [f"{where}: left and right both name stream {pred.left_ref[0]!r}; compare the two joined streams"]
        problem = op_named(pred.op).problem(types, pred.width)
        if problem is None:
            return []
        key, message = problem
        return [f"{where}.{key}: {message}" if key else f"{where}: {message}"]

    def task(self, name: str) -> TaskSpec:
        return next(t for t in self.tasks if t.name == name)


_ACCEPTED_VALUES = {
    "int": "an integer in -2^63..2^63-1",
    "float": "a finite number",
    "string": "a string",
    "bool": "true or false",
}


def _matches_type(value: Any, ftype: str) -> bool:
    """Whether a spec value (from YAML) is a value of a field of type `ftype` (bools are not numbers)."""
    if isinstance(value, bool):
        return ftype == "bool"
    if ftype == "int":
        return isinstance(value, int) and -(2**63) <= value < 2**63
    if ftype == "float":
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, str) if ftype == "string" else False


def parse_spec(data: Any) -> JoinSpec:
    """Validate a mapping (parsed YAML) into a JoinSpec, or raise SpecError naming every bad key."""
    if not isinstance(data, dict):
        got = type(data).__name__
        raise SpecError(f"<top level>: a join spec is a mapping with keys window, streams, tasks; got {got}")
    try:
        return JoinSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_errors(err)) from None


def load_spec(path: str | Path) -> JoinSpec:
    """Read and validate a YAML join spec file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError(f"{path}: cannot read the spec file ({err.strerror})") from None
    try:
        data = yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {err}") from None
    if isinstance(data, dict):
        data = {**data, "base_dir": str(Path(path).resolve().parent)}
    try:
        return parse_spec(data)
    except SpecError as err:
        raise SpecError(f"{path}: invalid join spec:\n{err}") from None


def _error_details(err: ValidationError, *under: str) -> list[InitErrorDetails]:
    """`err`'s errors located under the keys `under`, to raise again as part of an enclosing model's error."""
    return [
        InitErrorDetails(type=e["type"], loc=(*under, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
        for e in err.errors()
    ]


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors(include_url=False):
        loc = _dotted(e["loc"]) or "<top level>"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error" and not e["loc"]:
            lines.extend(msg.split("\n"))
            continue
        got = "" if e["type"] in ("missing", "value_error") else f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}{got}")
    return "\n".join(lines)


_CROSS_REFERENCES = "function-after[_cross_references(), JoinSpec]"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for before, part in zip((None, *loc), loc, strict=False):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("time", "count", "int", "float", "constrained-int", "constrained-float", _CROSS_REFERENCES):
            continue  # pydantic's union-branch and validator labels; not keys the user wrote
        elif before == "window" and part in kind_names():
            continue  # the window's kind tag (tumbling, hopping, ...), the union's branch
        else:
            out += f".{part}" if out else str(part)
    return out
