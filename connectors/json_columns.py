"""A batch of JSON messages decoded to typed columns in one call of pyarrow's JSON reader.

The per-message path (`JsonCodec.decode`, then `StreamSchema.check`) costs a few microseconds of Python per record
and held the Kafka reader at ~110k records/s a core. Here a whole batch of one stream's messages becomes Arrow
columns in C++, and the same rules are checked on the columns. The fast path answers only when it is sure to agree
with the per-message path, value for value; for anything else it returns None and the caller takes the per-message
path for the batch, which gives each bad record its reason (a batch with one bad record costs what it did before).

What makes the batch fall back, and why (pyarrow's reader is more lenient than orjson in these places, or cannot
tell a record apart): a null, empty or oversize message; one that is not valid UTF-8, does not start with "{" and
end with "}", or holds a line break (the messages are joined by newlines); the literals NaN and Infinity (orjson
refuses them, pyarrow takes them, even in undeclared fields); 1,000 or more brackets (orjson's nesting limit is
1,024); a message pyarrow refuses (duplicate declared keys, a value of the wrong JSON type, an int written as 1.0
or 1e3, an ISO-8601 timestamp); a missing or null declared field; an int outside +-(2^53 - 1), a timestamp outside
0..2^53 - 1, a non-finite float.
Numbers are converted by Arrow from their text, correctly rounded, so floats equal orjson's (integers beyond 64 bits
in a float field too: orjson reads them as floats).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from windjoin.operators.result_table import ARROW_TYPES
from windjoin.operators.schema import MAX_SAFE_INT, StreamSchema

_LENIENT = ("\n", "\r", "NaN", "Infinity")
_MAX_BRACKETS = 1000


def decode_columns(values: pa.Array, schema: StreamSchema, max_message_bytes: int) -> dict[str, pa.Array] | None:
    """The checked columns of one stream's messages (`schema.columns`: the timestamp as int64 epoch ms, then the
    declared fields), exactly as the per-message path would give them; None when any message needs that path."""
    text = _plain_objects(values, max_message_bytes)
    return None if text is None else _checked_columns(text, schema)


def decode_stream_columns(
    values: pa.Array, schemas: Mapping[str, StreamSchema], max_message_bytes: int
) -> dict[str, tuple[np.ndarray, dict[str, pa.Array]]] | None:
    """Messages of several streams, each naming its own in a string field "stream" (join-file's events): per stream,
    the positions of its messages and their checked columns; None when any message needs the per-message path
    (its stream not one of `schemas` included)."""
    text = _plain_objects(values, max_message_bytes)
    named = None if text is None else _read(text, [pa.field("stream", pa.string())])
    if named is None:
        return None
    streams = named["stream"]
    if not pc.all(pc.is_in(streams, pa.array(list(schemas)))).as_py():
        return None
    decoded = {}
    for name, schema in schemas.items():
        mask = pc.equal(streams, name)
        columns = _checked_columns(text.filter(mask), schema)
        if columns is None:
            return None
        decoded[name] = (np.flatnonzero(mask.to_numpy(zero_copy_only=False)), columns)
    return decoded


def _checked_columns(text: pa.StringArray, schema: StreamSchema) -> dict[str, pa.Array] | None:
    fields = [pa.field(schema.timestamp, pa.int64()), *(pa.field(n, ARROW_TYPES[t]) for n, t in schema.fields.items())]
    columns = _read(text, fields) if len(text) else {f.name: pa.array([], f.type) for f in fields}
    return columns if columns is not None and _in_range(columns, schema) else None


def _read(text: pa.StringArray, fields: list[pa.Field]) -> dict[str, pa.Array] | None:
    """`fields` of each message (one JSON object per message), none missing or null; None if pyarrow refuses."""
    lines = pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()), text)
    joined = pc.binary_join(lines, "\n")[0].as_buffer()
    try:
        table = pj.read_json(
            pa.BufferReader(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(joined) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != len(text):
        return None
    columns = {f.name: table.column(f.name).combine_chunks() for f in fields}
    return None if any(column.null_count for column in columns.values()) else columns


def _plain_objects(values: pa.Array, max_message_bytes: int) -> pa.StringArray | None:
    """The messages as UTF-8 text when each is one plain JSON object the reader and orjson read alike."""
    if not len(values) or values.null_count:
        return None
    lengths = pc.binary_length(values)
    if pc.min(lengths).as_py() < 2 or pc.max(lengths).as_py() > max_message_bytes:
        return None
    try:
        text = values.cast(pa.string())  # validates UTF-8
    except pa.ArrowInvalid:
        return None
    if not (pc.all(pc.starts_with(text, "{")).as_py() and pc.all(pc.ends_with(text, "}")).as_py()):
        return None
    if any(pc.any(pc.match_substring(text, bad)).as_py() for bad in _LENIENT):
        return None
    brackets = pc.add(pc.count_substring(text, "["), pc.count_substring(text, "{"))
    if pc.max(brackets).as_py() >= _MAX_BRACKETS:
        return None
    return text


def _in_range(columns: dict[str, pa.Array], schema: StreamSchema) -> bool:
    """The per-message path's range rules: ints within +-(2^53 - 1), timestamps in 0..2^53 - 1, finite floats."""
    ts = columns[schema.timestamp]
    if not len(ts):
        return True
    if pc.min(ts).as_py() < 0 or pc.max(ts).as_py() > MAX_SAFE_INT:
        return False
    for name, ftype in schema.fields.items():
        column = columns[name]
        if ftype == "int" and (pc.min(column).as_py() < -MAX_SAFE_INT or pc.max(column).as_py() > MAX_SAFE_INT):
            return False
        if ftype == "float" and not pc.all(pc.is_finite(column)).as_py():
            return False
    return True
