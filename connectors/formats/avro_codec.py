"""Avro records in the Confluent wire format, with schemas from a local registry of ``.avsc`` files.

Wire format (what Confluent's serializers write, byte for byte)::

    byte 0      magic byte 0
    bytes 1-4   schema id, unsigned 32-bit big-endian (ids are kept in 0 .. 2**31 - 1, Java's int range)
    bytes 5-    the record, Avro binary encoding without a container header ("schemaless"), fastavro

:class:`SchemaRegistry` maps ids to schemas loaded from ``.avsc`` files named in the join spec; with a
registry server in the spec, ``schema_registry.RegistrySchemas`` fetches them by id instead.

Schema ids (stable across processes and restarts)
-------------------------------------------------
* An **explicit id** given with the file (``registry.load_avsc(path, schema_id=7)``; in a join spec, the
  ``schema_id`` written next to the schema file) is used as is. Use it when the topics are also written or
  read by Confluent tooling whose registry already assigned ids.
* Otherwise the id is **derived** from the schema itself: the first 4 bytes, big-endian, of the SHA-256 of
  the schema's Avro *Parsing Canonical Form*, masked to 31 bits (:func:`derived_schema_id`). It depends
  only on what determines the bytes on the wire (names, types, field order, symbols, sizes), not on file
  paths, load order, whitespace, ``doc``, ``default`` or ``aliases``, and not on Python's hash seed; so every
  producer and consumer that loads the same schema computes the same id, today and after a restart.
  Schemas that differ only in docs or defaults share an id (their wire bytes are identical).

Registering a different schema under an id that is already taken raises :class:`SchemaConflictError`
rather than silently shadowing it; give one of the two an explicit id.

Only record schemas are accepted (events are records), and schemas with an array whose items encode to
zero bytes (``null``, an empty record, a ``fixed`` of size 0) are refused: a few bytes could claim 2**40 of
them and the decoder would never finish.

Decoding an untrusted message never raises anything but :class:`~windjoin.connectors.formats.codec_errors.DecodeError`
(for a message that is not ``None``), and keeps no state between messages.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Mapping
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import load_schema, to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

from windjoin.connectors.formats.codec_errors import (
    BAD_AVRO,
    BAD_MAGIC_BYTE,
    DEFAULT_MAX_MESSAGE_BYTES,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    DecodeError,
    EncodeError,
    check_decodable,
    check_encoded_size,
    check_max_message_bytes,
)

MAGIC_BYTE = 0
HEADER_SIZE = 5
MAX_SCHEMA_ID = 2**31 - 1


class SchemaConflictError(ValueError):
    """A schema id is already registered with a schema of a different wire form."""


def canonical_form(schema: Mapping[str, Any] | str) -> str:
    """The Avro Parsing Canonical Form of ``schema`` (a parsed or unparsed schema dict, or its JSON text)."""
    return to_parsing_canonical_form(_as_schema_object(schema))


def derived_schema_id(schema: Mapping[str, Any] | str) -> int:
    """The deterministic id of a schema: SHA-256 of its Parsing Canonical Form, first 4 bytes, 31 bits."""
    return _id_of_canonical_form(canonical_form(schema))


def _id_of_canonical_form(canonical: str) -> int:
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & MAX_SCHEMA_ID


def _as_schema_object(schema: Mapping[str, Any] | str) -> Any:
    if isinstance(schema, str):
        try:
            return orjson.loads(schema)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"schema text is not JSON: {exc}") from exc
    return schema


def _zero_width_array(canonical: str) -> str | None:
    """The first array in a schema whose items encode to zero bytes (null, fixed of size 0, records of
    only such fields), or None. A few bytes can claim 2**60 such items, so decoding would never end."""
    named: dict[str, Any] = {}

    def zero_width(schema: Any, visiting: frozenset[str]) -> bool:
        if isinstance(schema, str):
            if schema in named:
                return schema not in visiting and zero_width(named[schema], visiting | {schema})
            return schema == "null"
        if isinstance(schema, list):
            return False  # a union writes its branch index: at least one byte
        kind = schema["type"]
        if kind in ("record", "enum", "fixed"):
            named.setdefault(schema["name"], schema)
        if kind == "fixed":
            return schema["size"] == 0
        if kind == "record":
            inner = visiting | {schema["name"]}
            return all([zero_width(field["type"], inner) for field in schema["fields"]])
        return False

    found: list[str] = []

    def walk(schema: Any, path: str) -> None:
        if isinstance(schema, list):
            for branch in schema:
                walk(branch, path)
        elif isinstance(schema, dict):
            kind = schema["type"]
            zero_width(schema, frozenset())  # records the named types defined here
            if kind == "record":
                for field in schema["fields"]:
                    walk(field["type"], f"{path}.{field['name']}")
            elif kind == "array":
                if zero_width(schema["items"], frozenset()):
                    found.append(path)
                walk(schema["items"], f"{path}[]")
            elif kind == "map":
                walk(schema["values"], f"{path}{{}}")

    walk(orjson.loads(canonical), "")
    return found[0].lstrip(".") if found else None


def _check_schema_id(schema_id: object) -> int:
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema_id {schema_id!r} is not an integer in 0..{MAX_SCHEMA_ID}")
    return schema_id


class SchemaRegistry:
    """Schema ids to parsed Avro record schemas, filled from ``.avsc`` files or schema dicts.

    Written while a stream is configured; decoding only reads it. Picklable (plain dicts), so a codec
    holding it can be shipped to Spark executors.
    """

    def __init__(self) -> None:
        self._parsed: dict[int, dict[str, Any]] = {}
        self._canonical: dict[int, str] = {}

    def register(self, schema: Mapping[str, Any] | str, schema_id: int | None = None) -> int:
        """Register an Avro record schema (dict or JSON text); returns its id (explicit, else derived)."""
        schema_obj = _as_schema_object(schema)
        try:
            parsed = parse_schema(schema_obj)
        except Exception as exc:  # fastavro raises several exception types for a bad schema
            raise ValueError(f"not a valid Avro schema: {type(exc).__name__}: {exc}") from exc
        return self._add(parsed, schema_id, source="schema")

    def load_avsc(self, path: str | os.PathLike[str], schema_id: int | None = None) -> int:
        """Load one ``.avsc`` file and register it; returns its id (explicit, else derived).

        Named types defined in other files of the same folder are resolved when those files are named
        ``<namespace>.<Name>.avsc`` (fastavro's ``load_schema`` convention).
        """
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Avro schema file not found: {os.fspath(path)}")
        try:
            parsed = load_schema(os.fspath(path))
        except Exception as exc:  # JSON errors, unknown types, bad names: all a bad file
            raise ValueError(f"{os.fspath(path)}: not a valid Avro schema: {type(exc).__name__}: {exc}") from exc
        return self._add(parsed, schema_id, source=os.fspath(path))

    def _add(self, parsed: Any, schema_id: int | None, source: str) -> int:
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise ValueError(f"{source}: the top-level Avro type must be a record (events are records)")
        canonical = to_parsing_canonical_form(parsed)
        zero_width_path = _zero_width_array(canonical)
        if zero_width_path is not None:
            raise ValueError(
                f"{source}: the array at {zero_width_path} has items that encode to zero bytes; a tiny "
                "message could then claim billions of items, so such schemas are refused"
            )
        if schema_id is None:
            schema_id = _id_of_canonical_form(canonical)
        else:
            _check_schema_id(schema_id)
        existing = self._canonical.get(schema_id)
        if existing is not None:
            if existing != canonical:
                raise SchemaConflictError(
                    f"{source}: schema id {schema_id} is already registered for {existing}, "
                    f"not {canonical}; give one of them an explicit schema_id"
                )
            return schema_id
        self._parsed[schema_id] = parsed
        self._canonical[schema_id] = canonical
        return schema_id

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The parsed schema with this id (KeyError if unknown)."""
        return self._parsed[schema_id]

    def find(self, schema_id: int) -> dict[str, Any]:
        """The writer schema a decoder needs for `schema_id`; DecodeError (unknown_schema_id) if there is none."""
        found = self._parsed.get(schema_id)
        if found is None:
            known = self.ids()
            shown = ", ".join(map(str, known[:10])) + (", ..." if len(known) > 10 else "")
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not registered (known: {shown})")
        return found

    def canonical_form(self, schema_id: int) -> str:
        """The Parsing Canonical Form of the schema with this id (KeyError if unknown)."""
        return self._canonical[schema_id]

    def ids(self) -> list[int]:
        """The registered ids, ascending."""
        return sorted(self._parsed)

    def __contains__(self, schema_id: object) -> bool:
        return schema_id in self._parsed

    def __len__(self) -> int:
        return len(self._parsed)


class AvroCodec:
    """Encode records with one writer schema; decode messages written with any schema in the registry."""

    format = "avro"

    def __init__(
        self,
        registry: SchemaRegistry,
        schema_id: int | None,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        validate_records: bool = True,
    ) -> None:
        """``schema_id`` None: a decoder only (one that reads what others registered). ``validate_records=False``
        skips fastavro's range/type check on encode (about 5x faster encodes, for producers such as the load
        generator whose records are known to fit); decoding is unaffected."""
        if not isinstance(registry, SchemaRegistry):
            raise ValueError(f"registry must be a SchemaRegistry, not {type(registry).__name__}")
        if schema_id is not None:
            _check_schema_id(schema_id)
            if schema_id not in registry:
                raise ValueError(f"schema_id {schema_id} is not in the registry (known: {registry.ids()})")
        self.registry = registry
        self.schema_id = schema_id
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)
        self.validate_records = bool(validate_records)
        self._header = b"" if schema_id is None else bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The Confluent wire-format message for ``record``; EncodeError if it does not fit the schema.

        Every schema field must be present unless it has a default; fields the schema does not name are an
        error (never silently dropped); values are range-checked (an ``int`` field takes 32 bits).
        """
        if not isinstance(record, Mapping):
            raise EncodeError(f"a record must be a mapping, not {type(record).__name__}")
        if self.schema_id is None:
            raise EncodeError("this codec only decodes: it was built without a writer schema (schema_id)")
        schema = self.registry.schema(self.schema_id)
        try:
            if self.validate_records:
                validate(record, schema, raise_errors=True)
            buf = io.BytesIO()
            buf.write(self._header)
            schemaless_writer(buf, schema, record, strict_allow_default=True)
        except ValidationError as exc:
            problems = "; ".join(str(error) for error in exc.errors)
            raise EncodeError(f"record does not fit schema id {self.schema_id}: {problems}") from exc
        except Exception as exc:  # fastavro signals a misfit record with several exception types
            raise EncodeError(f"record does not fit schema id {self.schema_id}: {exc}") from exc
        message = buf.getvalue()
        return check_encoded_size(message, self.max_message_bytes)

    def decode(self, data: bytes | bytearray | memoryview | None) -> dict[str, Any]:
        """The record in a Confluent wire-format message; DecodeError with a reason if it is malformed."""
        check_decodable(data, self.max_message_bytes)
        size = len(data)
        if size < HEADER_SIZE:
            raise DecodeError(TRUNCATED, f"{size} bytes; the Confluent header alone is {HEADER_SIZE}")
        if data[0] != MAGIC_BYTE:
            raise DecodeError(BAD_MAGIC_BYTE, f"first byte is 0x{data[0]:02x}, expected 0x{MAGIC_BYTE:02x}")
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        schema = self.registry.find(schema_id)
        body = io.BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(body, schema)
        except Exception as exc:  # any failure on untrusted bytes is a bad body, never a crash
            raise DecodeError(
                BAD_AVRO, f"body does not decode with schema id {schema_id}: {type(exc).__name__}: {exc}"
            ) from exc
        trailing = size - body.tell()
        if trailing:
            raise DecodeError(BAD_AVRO, f"{trailing} trailing bytes after the record (schema id {schema_id})")
        return record
