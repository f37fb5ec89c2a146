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

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from windjoin.operators.result_table import ARROW_TYPES
from windjoin.operators.schema import MAX_SAFE_INT, StreamSchema

_LENIENT = (b"\n", b"\r", b"NaN", b"Infinity")
_MAX_BRACKETS = 1000


def decode_columns(values: pa.Array, schema: StreamSchema, max_message_bytes: int) -> dict[str, pa.Array] | None:
    """The checked columns of one stream's messages (`schema.columns`: the timestamp as int64 epoch ms, then the
    declared fields), exactly as the per-message path would give them; None when any message needs that path."""
    text = _plain_objects(values, max_message_bytes)
    return None if text is None else _checked_columns(text, schema)


Decoded = dict[str, tuple[np.ndarray, dict[str, pa.Array]]]


def decode_stream_columns(
    values: pa.Array, schemas: Mapping[str, StreamSchema], max_message_bytes: int
) -> Decoded | None:
    """Messages of several streams, each naming its own in a string field "stream" (join-file's events): per stream,
    the positions of its messages and their checked columns; None when any message needs the per-message path
    (its stream not one of `schemas` included).

    The messages are read once for the fields of every stream when no two streams give a field different types;
    a message of one stream is then also read for the other streams' fields, which can only make the reader
    refuse more (never read a declared field differently), and then each stream's messages are read apart."""
    text = _plain_objects(values, max_message_bytes)
    return None if text is None else _stream_columns(_joined(text), len(text), schemas, lambda: text)


def decode_stream_lines(
    text: bytes, starts: np.ndarray, ends: np.ndarray, schemas: Mapping[str, StreamSchema], max_message_bytes: int
) -> Decoded | None:
    """`decode_stream_columns` of the lines of `text` (line i is text[starts[i]:ends[i]]; one line break between
    consecutive lines, none before the first or after the last, as in a JSON Lines file), checked and read where
    they lie rather than gathered into an array of messages first."""
    if not _plain_lines(text, starts, ends, max_message_bytes):
        return None

    def lines() -> pa.StringArray:
        values = np.delete(np.frombuffer(text, dtype=np.uint8), ends[:-1])  # the line breaks
        offsets = np.append(starts - np.arange(len(starts)), len(values)).astype(np.int32)
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(values)]
        return pa.Array.from_buffers(pa.string(), len(starts), buffers)

    return _stream_columns(pa.py_buffer(text), len(starts), schemas, lines)


def _stream_columns(
    joined: pa.Buffer, n: int, schemas: Mapping[str, StreamSchema], text: Callable[[], pa.StringArray]
) -> Decoded | None:
    """`decode_stream_columns` of `n` plain messages, `joined` one a line (`text`: them as an array)."""
    union = _union_fields(schemas)
    columns = None if union is None else _parse(joined, n, union)
    streams = (columns or _read(text(), [pa.field("stream", pa.string())]) or {}).get("stream")
    if streams is None or streams.null_count or not pc.all(pc.is_in(streams, pa.array(list(schemas)))).as_py():
        return None
    decoded = {}
    for name, schema in schemas.items():
        mask = pc.equal(streams, name)
        if columns is None:
            own = _checked_columns(text().filter(mask), schema)
        else:
            own = {f.name: columns[f.name].filter(mask) for f in _fields(schema)}
            own = None if any(c.null_count for c in own.values()) or not _in_range(own, schema) else own
        if own is None:
            return None
        decoded[name] = (np.flatnonzero(mask.to_numpy(zero_copy_only=False)), own)
    return decoded


def _fields(schema: StreamSchema) -> list[pa.Field]:
    return [pa.field(schema.timestamp, pa.int64()), *(pa.field(n, ARROW_TYPES[t]) for n, t in schema.fields.items())]


def _union_fields(schemas: Mapping[str, StreamSchema]) -> list[pa.Field] | None:
    """ "stream" and every stream's fields, or None when two give one name different types."""
    types = {"stream": pa.string()}
    for schema in schemas.values():
        for f in _fields(schema):
            if types.setdefault(f.name, f.type) != f.type:
                return None
    return [pa.field(name, t) for name, t in types.items()]


def _checked_columns(text: pa.StringArray, schema: StreamSchema) -> dict[str, pa.Array] | None:
    fields = _fields(schema)
    columns = _read(text, fields) if len(text) else {f.name: pa.array([], f.type) for f in fields}
    return columns if columns is not None and _in_range(columns, schema) else None


def _read(text: pa.StringArray, fields: list[pa.Field]) -> dict[str, pa.Array] | None:
    """`fields` of each message (one JSON object per message), none missing or null; None if pyarrow refuses."""
    columns = _parse(_joined(text), len(text), fields)
    return None if columns is None or any(column.null_count for column in columns.values()) else columns


def _joined(text: pa.StringArray) -> pa.Buffer:
    """The messages one a line."""
    lines = pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()), text)
    return pc.binary_join(lines, "\n")[0].as_buffer()


def _parse(joined: pa.Buffer, n: int, fields: list[pa.Field]) -> dict[str, pa.Array] | None:
    """`fields` of each of the `n` messages of `joined`, one a line (null where missing or null); None if pyarrow
    refuses a message."""
    try:
        table = pj.read_json(
            pa.BufferReader(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, joined.size + 1)),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != n:
        return None
    return {f.name: table.column(f.name).combine_chunks() for f in fields}


def _plain_objects(values: pa.Array, max_message_bytes: int) -> pa.StringArray | None:
    """The messages as UTF-8 text when each is one plain JSON object the reader and orjson read alike."""
    if not len(values) or values.null_count:
        return None
    lengths = pc.min_max(pc.binary_length(values)).as_py()
    if lengths["min"] < 2 or lengths["max"] > max_message_bytes:
        return None
    try:
        text = values.cast(pa.string())  # validates UTF-8
    except pa.ArrowInvalid:
        return None
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset : text.offset + len(text) + 1]
    end_to_end = np.frombuffer(text.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].tobytes()
    return text if _plain_text(end_to_end, offsets[:-1] - offsets[0], offsets[1:] - offsets[0], "") else None


def _plain_lines(text: bytes, starts: np.ndarray, ends: np.ndarray, max_message_bytes: int) -> bool:
    """`_plain_objects` for the lines of `text`, one line break apart."""
    if not len(starts) or starts[0] != 0 or ends[-1] != len(text) or (starts[1:] != ends[:-1] + 1).any():
        return False
    lengths = ends - starts
    if lengths.min() < 2 or lengths.max() > max_message_bytes or text.count(b"\n") != len(starts) - 1:
        return False
    try:
        text.decode("utf-8")  # strict, as orjson
    except UnicodeDecodeError:
        return False
    return _plain_text(text, starts, ends, "\n")


def _plain_text(text: bytes, starts: np.ndarray, ends: np.ndarray, separator: str) -> bool:
    """Whether messages `text[starts[i]:ends[i]]` (UTF-8, `separator` between them) are plain objects.

    Each message starts with "{" and ends with "}", so a text that no message holds (it has no brace) is looked
    for in all of them at once, end to end."""
    raw = np.frombuffer(text, dtype=np.uint8)
    if not ((raw[starts] == ord("{")).all() and (raw[ends - 1] == ord("}")).all()):
        return False
    if any(bad in text for bad in _LENIENT if bad != separator.encode()):
        return False
    if text.count(b"[") + text.count(b"{") - (len(starts) - 1) < _MAX_BRACKETS:
        return True  # each message holds a brace, so none holds more than the rest leave
    at = np.flatnonzero((raw == ord("[")) | (raw == ord("{")))
    return bool((np.searchsorted(at, ends) - np.searchsorted(at, starts)).max() < _MAX_BRACKETS)


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
