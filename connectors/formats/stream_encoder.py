"""Events of one spec stream as Kafka messages: ``(key bytes | None, value bytes, timestamp ms)``.

An event is a mapping such as ``{"ts": 1700000000000, "k": 3, "x": 7}`` (a ``"stream"`` entry naming this
stream is allowed and left out of the message). :meth:`StreamEncoder.encode`:

* checks the timestamp and the declared fields with the stream's :class:`~windjoin.operators.schema.StreamSchema`
  (the same checks, reasons and ranges the join applies), and converts an ISO-8601 timestamp to epoch ms;
* builds the record: the timestamp (epoch ms) and the declared fields in spec order, then the event's other
  fields (JSON: all of them; Avro: those the schema names; one it does not name is an error);
* encodes it with the stream's codec: JSON, or Avro in the Confluent wire format with the writer schema loaded
  from the stream's ``.avsc`` (relative to ``spec.base_dir``) under the spec's ``schema_id`` (else the id derived
  from the schema, see ``avro_codec``), or with a schema registry in the spec, under the id the registry gives
  when the schema is registered under the stream's subject (default ``<topic>-value``);
* Kafka key: the stream's ``key`` field as UTF-8 text (ints in decimal, floats by ``repr``, bools ``true`` /
  ``false``, strings as they are), None when the stream has no key; Kafka timestamp: the event time.

An event that cannot be encoded raises :class:`EventEncodeError`, which names the field and a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from fastavro.schema import load_schema
from fastavro.validation import ValidationError, validate

from windjoin.connectors.formats.avro_codec import SchemaRegistry
from windjoin.connectors.formats.codec import Codec, codec_for
from windjoin.connectors.formats.codec_errors import EncodeError
from windjoin.connectors.formats.schema_registry import RegistryConnection
from windjoin.operators.schema import RecordError, StreamSchema
from windjoin.operators.spec import JoinSpec, StreamSpec

# Reasons beyond the join's own (missing_timestamp, bad_timestamp, missing_field, wrong_type, out_of_range).
NOT_A_MAPPING = "not_an_object"
OTHER_STREAM = "other_stream"
NOT_IN_SCHEMA = "not_in_schema"
SCHEMA_MISMATCH = "schema_mismatch"
NOT_ENCODABLE = "not_encodable"

STREAM_ENTRY = "stream"  # the routing entry of join-file's JSON Lines; never part of the message


class KafkaMessage(NamedTuple):
    key: bytes | None
    value: bytes
    timestamp_ms: int


class EventEncodeError(EncodeError):
    """An event that cannot become a message: ``field`` names the culprit (None: the event as a whole)."""

    def __init__(self, reason: str, field: str | None, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.field = field
        self.detail = detail


def key_text(value: Any) -> str:
    """The Kafka key text of a checked field value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class StreamEncoder:
    """Encodes the events of one stream; build it with :func:`stream_encoder`."""

    def __init__(self, name: str, stream: StreamSpec, codec: Codec, avro_fields: tuple[str, ...] | None) -> None:
        self.name = name
        self.stream = stream
        self.topic = stream.topic
        self.codec = codec
        self.format = codec.format
        self._schema = StreamSchema(stream)
        self._columns = self._schema.columns
        self._key_index = None if stream.key is None else self._columns.index(stream.key)
        self._avro_fields = None if avro_fields is None else frozenset(avro_fields)
        # One single-field schema per declared field, to name the culprit when a full check fails.
        self._probes = {
            field: StreamSchema(StreamSpec(timestamp=stream.timestamp, fields={field: ftype}))
            for field, ftype in stream.fields.items()
        }

    def encode(self, event: Mapping[str, Any]) -> KafkaMessage:
        """The message of ``event``; EventEncodeError naming the field if it cannot be encoded."""
        if not isinstance(event, Mapping):
            raise EventEncodeError(NOT_A_MAPPING, None, f"an event is a JSON object, not {type(event).__name__}")
        routed = STREAM_ENTRY in event and STREAM_ENTRY not in self.stream.fields
        if routed and event[STREAM_ENTRY] != self.name:
            raise EventEncodeError(
                OTHER_STREAM,
                STREAM_ENTRY,
                f"field {STREAM_ENTRY!r}: the event is for stream {event[STREAM_ENTRY]!r}, not {self.name!r}",
            )
        try:
            row = self._schema.check(event)
        except RecordError as err:
            field = self._culprit(event, err)
            detail = str(err) if repr(field) in str(err) else f"field {field!r}: {err}"
            raise EventEncodeError(err.reason, field, detail) from None
        record = dict(zip(self._columns, row, strict=True))
        for name, value in event.items():
            if name in record or (routed and name == STREAM_ENTRY):
                continue
            if self._avro_fields is not None and name not in self._avro_fields:
                raise EventEncodeError(
                    NOT_IN_SCHEMA,
                    name,
                    f"field {name!r} is not in the Avro schema of stream {self.name!r} "
                    f"(its fields: {sorted(self._avro_fields)})",
                )
            record[name] = value
        try:
            value = self.codec.encode(record)
        except EncodeError as err:
            raise self._explain(record, err) from None
        key = None if self._key_index is None else key_text(row[self._key_index]).encode("utf-8")
        return KafkaMessage(key, value, row[0])

    def _culprit(self, event: Mapping[str, Any], err: RecordError) -> str:
        """The field a failed StreamSchema check stopped at (the checks run timestamp first, then in order)."""
        timestamp = self.stream.timestamp
        if err.reason in ("missing_timestamp", "bad_timestamp"):
            return timestamp
        for field, probe in self._probes.items():
            try:
                probe.check({timestamp: 0, field: event[field]} if field in event else {timestamp: 0})
            except RecordError:
                return field
        return timestamp  # not reached: some field failed

    def _explain(self, record: dict[str, Any], err: EncodeError) -> EventEncodeError:
        """Name the field an Avro encode failed on (fastavro's validator reports its path)."""
        if self.format != "avro":
            return EventEncodeError(NOT_ENCODABLE, None, str(err))
        schema = self.codec.registry.schema(self.codec.schema_id)  # type: ignore[attr-defined]
        try:
            validate(record, schema, raise_errors=True)
        except ValidationError as exc:
            first = exc.errors[0]
            path = str(getattr(first, "field", "") or "")
            field = path.removeprefix(schema["name"] + ".") or None
            return EventEncodeError(
                SCHEMA_MISMATCH,
                field,
                f"field {field!r} = {getattr(first, 'datum', None)!r} does not fit its Avro type "
                f"{getattr(first, 'schema', '?')!r} (schema id {self.codec.schema_id})",  # type: ignore[attr-defined]
            )
        return EventEncodeError(NOT_ENCODABLE, None, str(err))


def _registered(spec: JoinSpec, name: str, path: Path, schema: dict[str, Any]) -> int:
    """The id the spec's registry gives the stream's schema, registered under its subject (`<topic>-value`)."""
    stream = spec.streams[name]
    if stream.subject is None and stream.topic is None:
        raise ValueError(f"streams.{name}.subject: needed to register {path} (or a topic, for `<topic>-value`)")
    subject = stream.subject or f"{stream.topic}-value"
    return RegistryConnection.from_spec(spec.schema_registry).register(subject, schema)


def avro_schema_path(spec: JoinSpec, stream: StreamSpec) -> Path:
    """The stream's ``.avsc`` file: its ``schema`` path, relative to the spec file's folder."""
    if stream.schema_file is None:
        raise ValueError("the stream has no schema file")
    return Path(spec.base_dir) / stream.schema_file


def stream_encoder(spec: JoinSpec, name: str, *, validate_records: bool = True) -> StreamEncoder:
    """The encoder of stream ``name`` of ``spec``.

    ``validate_records=False`` skips fastavro's per-record type check on Avro encodes (for generated events
    known to fit; several times faster). Raises ValueError naming the key when the stream is unknown, or
    when its Avro schema is unreadable or lacks the timestamp or a declared field.
    """
    if name not in spec.streams:
        raise ValueError(f"unknown stream {name!r}; the spec declares {list(spec.streams)}")
    stream = spec.streams[name]
    if stream.format == "json":
        return StreamEncoder(name, stream, codec_for("json"), None)
    path = avro_schema_path(spec, stream)
    registry = SchemaRegistry()
    try:
        schema_id = registry.load_avsc(path, schema_id=stream.schema_id)
    except (OSError, ValueError) as err:
        raise ValueError(f"streams.{name}.schema: {err}") from None
    if spec.schema_registry is not None:  # the same schema under the id the registry gives it
        schema = load_schema(str(path), _write_hint=False)  # with its docs and defaults, for compatibility checks
        schema_id = registry.register(schema, schema_id=_registered(spec, name, path, schema))
    fields = tuple(f["name"] for f in registry.schema(schema_id)["fields"])
    missing = [c for c in (stream.timestamp, *stream.fields) if c not in fields]
    if missing:
        raise ValueError(
            f"streams.{name}.schema: {path} has no field(s) {missing} that the spec declares (schema fields: "
            f"{list(fields)})"
        )
    codec = codec_for("avro", registry=registry, schema_id=schema_id, validate_records=validate_records)
    return StreamEncoder(name, stream, codec, fields)
