"""A task's result table as Kafka records: one value per row (JSON or Avro), its key and its timestamp.

The value holds the row's fields as Parquet does (`operators.result_table`): one object per joined stream (its
timestamp, then its declared fields; `null` for the side an outer, semi or anti row lacks), `window_start` and
`window_end` where the window kind has them, `batch_id` and `emitted_at`.

- JSON: built column-wise with Arrow (no per-row Python): ints in decimal, floats as Arrow's shortest round-trip
  text (`1.0` is written `1`), bools `true`/`false`, strings escaped. A table holding what that cannot write as
  JSON (a string with a control character, a float that is not finite) is written row by row with orjson instead
  (non-finite floats become `null`, as orjson writes them).
- Avro: Confluent's wire format (magic byte, the 4-byte schema id, the record) with the task's record schema
  (`avro_schema`): each stream a nested record (a union with null for the tasks whose rows may lack one), longs,
  doubles, strings, booleans; encoded by fastavro row by row.
- Key: the task's equality key where it has one (the joined streams are keyed and the task joins them on their
  keys, which the spec requires of keyed streams), as the input streams' keys are written (`stream_encoder.key_text`:
  ints in decimal, strings as they are, bools `true`/`false`, floats by `repr`), taken from the first joined
  stream that the row holds; no key (null) for a task over streams without keys.
- Timestamp: the row's result time (the latest of its tuples' timestamps, `result_table.result_times`); a result
  time of exactly 0 (the epoch) is stamped with the producer's clock, since librdkafka reads a timestamp of 0 as
  "now" (event times are never negative: the readers dead-letter them). The value keeps the exact times.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastavro import parse_schema, schemaless_writer

from windjoin.connectors.formats.avro_codec import MAGIC_BYTE
from windjoin.connectors.formats.stream_encoder import key_text
from windjoin.operators.result_table import result_times, table_type
from windjoin.operators.spec import JoinSpec

_AVRO_TYPES = {"int": "long", "float": "double", "string": "string", "bool": "boolean"}
_ESCAPE = r'[\x00-\x1f"\\]'  # what JSON strings cannot hold as they are


def key_fields(spec: JoinSpec, task: str) -> dict[str, str] | None:
    """`{stream: key field}` in join order for a task over keyed streams (joined on the keys, as the spec
    requires), None for a task over streams without keys."""
    streams = spec.task(task).join
    keys = {s: spec.streams[s].key for s in streams}
    if any(k is None for k in keys.values()):
        return None
    return {s: str(k) for s, k in keys.items()}


def record_keys(table: pa.Table, fields: dict[str, str] | None) -> list[bytes] | None:
    """Each row's key (see the module docstring), or None when the task has none."""
    if fields is None or not table.num_rows:
        return None
    columns = [pc.struct_field(table.column(s), k) for s, k in fields.items()]
    key = pc.coalesce(*columns) if len(columns) > 1 else columns[0]
    if pa.types.is_floating(key.type):  # repr, as the inputs' keys are written
        return [key_text(float(v)).encode() for v in key.to_numpy(zero_copy_only=False)]
    text = pc.cast(key, pa.string())
    return pc.cast(text, pa.binary()).to_pylist()


def record_timestamps(table: pa.Table) -> list[int]:
    """Each row's result time (epoch ms)."""
    return result_times(table).tolist()


def json_values(table: pa.Table) -> list[bytes]:
    """Each row as a JSON object (see the module docstring)."""
    if not table.num_rows:
        return []
    parts = _json_parts(table)
    if parts is None:
        return _json_rows(table)
    joined = pc.binary_join_element_wise(*parts, "")
    return pc.cast(joined, pa.binary()).to_pylist()


def _json_parts(table: pa.Table) -> list[Any] | None:
    """The pieces whose row-wise concatenation is each row's JSON, as one flat list (a stream's object written in
    place where no row lacks it, joined by itself and chosen with `null` where some do); None when some value
    needs orjson."""
    parts: list[Any] = []
    for index, field in enumerate(table.schema):
        _literal(parts, ("{" if index == 0 else ",") + orjson.dumps(field.name).decode() + ":")
        column = table.column(field.name)
        if not pa.types.is_struct(field.type):
            value = _json_scalar(column)
            if value is None:
                return None
            parts.append(value)
            continue
        inner: list[Any] = []
        for c, child in enumerate(field.type):
            _literal(inner, ("{" if c == 0 else ",") + orjson.dumps(child.name).decode() + ":")
            value = _json_scalar(pc.struct_field(column, child.name))
            if value is None:
                return None
            inner.append(value)
        _literal(inner, "}")
        if column.null_count:
            text = pc.binary_join_element_wise(*inner, "")
            parts.append(pc.if_else(pc.is_valid(column), text, "null"))
        else:
            for part in inner:
                if isinstance(part, str):
                    _literal(parts, part)
                else:
                    parts.append(part)
    _literal(parts, "}")
    return parts


def _literal(parts: list[Any], text: str) -> None:
    """Append literal `text`, merged into a literal before it (fewer arguments to join)."""
    if parts and isinstance(parts[-1], str):
        parts[-1] += text
    else:
        parts.append(text)


def _json_scalar(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array | None:
    """A column's values as JSON text (nulls as they are: only a lacking side is null, written `null` whole)."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_floating(kind):
        if not pc.all(pc.is_finite(pc.fill_null(column, 0.0))).as_py():
            return None
        return pc.cast(column, pa.string())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = pc.fill_null(column, "")
        if pc.any(pc.match_substring_regex(column, _ESCAPE)).as_py():
            return None
        return pc.binary_join_element_wise('"', column, '"', "")
    return None


def _json_rows(table: pa.Table) -> list[bytes]:
    """The row-by-row path: orjson over the rows as Python values."""
    return [orjson.dumps(row) for row in table.to_pylist()]


def avro_schema(spec: JoinSpec, task: str, table_schema: pa.Schema) -> dict[str, Any]:
    """The Avro record schema of a task's result rows (`table_schema`: its `result_table.result_schema`)."""
    nullable = table_type(table_schema.empty_table()) != "inner"
    fields: list[dict[str, Any]] = []
    for field in table_schema:
        if pa.types.is_struct(field.type):
            stream = spec.streams[field.name]
            children = [{"name": stream.timestamp, "type": "long"}]
            children += [{"name": n, "type": _AVRO_TYPES[t]} for n, t in stream.fields.items()]
            record = {"type": "record", "name": f"{field.name}_tuple", "fields": children}
            fields.append({"name": field.name, "type": ["null", record] if nullable else record})
        else:
            fields.append({"name": field.name, "type": "long"})
    return {"type": "record", "name": task, "namespace": "windjoin.results", "fields": fields}


def avro_encoder(schema: dict[str, Any], schema_id: int) -> Callable[[pa.Table], list[bytes]]:
    """Rows to Confluent wire-format Avro values with `schema` under `schema_id`."""
    parsed = parse_schema(schema)
    header = bytes([MAGIC_BYTE]) + int(schema_id).to_bytes(4, "big")

    def encode(table: pa.Table) -> list[bytes]:
        out = []
        for row in table.to_pylist():
            buf = io.BytesIO()
            buf.write(header)
            schemaless_writer(buf, parsed, row)
            out.append(buf.getvalue())
        return out

    return encode
