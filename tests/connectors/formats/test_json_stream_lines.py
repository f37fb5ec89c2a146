"""Batch decoding of several streams' messages (join-file's events), from an array of messages or from the lines of
a buffer where they lie: both read every message as the per-message path does (orjson, the stream's schema) or
decline, and agree with each other; with one read for all streams' fields or, when two streams give a field
different types, one per stream."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.json_messages import MAX_BYTES, ODD_MESSAGES, extra_values, same
from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_codec import JsonCodec
from windjoin.connectors.formats.json_columns import decode_stream_columns, decode_stream_lines
from windjoin.connectors.formats.jsonl_blocks import LineBlock
from windjoin.operators.schema import MAX_SAFE_INT, RecordError, StreamSchema
from windjoin.operators.spec import StreamSpec

CODEC = JsonCodec()
SHARED = {  # R.x and S.x agree: one read for both streams
    "R": StreamSchema(StreamSpec(fields={"k": "int", "x": "float", "s": "string"})),
    "S": StreamSchema(StreamSpec(timestamp="t", fields={"k": "int", "x": "float", "b": "bool"})),
}
CLASHING = {  # S.x is an int: each stream read apart
    "R": SHARED["R"],
    "S": StreamSchema(StreamSpec(timestamp="t", fields={"k": "int", "x": "int", "b": "bool"})),
}

ints = st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
r_records = st.fixed_dictionaries(
    {"stream": st.just("R"), "ts": st.integers(0, MAX_SAFE_INT), "k": ints, "x": st.floats(-1e9, 1e9), "s": st.text()},
    optional={"b": extra_values, "t": extra_values},
)
s_records = st.fixed_dictionaries(
    {"stream": st.just("S"), "t": st.integers(0, MAX_SAFE_INT), "k": ints, "x": ints, "b": st.booleans()},
    optional={"s": extra_values, "ts": extra_values},
)
ODD = (
    [m for m in ODD_MESSAGES if m and b"\n" not in m]
    + [m.replace(b'{"ts"', b'{"stream":"R","ts"', 1) for m in ODD_MESSAGES if m and m.startswith(b'{"ts"')]
    + [b'{"stream":"Q","ts":1}', b'{"stream":1,"ts":1}', b'{"stream":null,"t":1}', b'{"stream":"S","t":1,"k":1,"x":1}']
)


def _per_message(message: bytes, schemas: dict) -> tuple[str, tuple] | None:
    try:
        record = CODEC.decode(message)
        stream = record.get("stream")
        if not isinstance(stream, str) or stream not in schemas:
            return None
        return stream, schemas[stream].check(record)
    except (DecodeError, RecordError):
        return None


def _block(messages: list[bytes]) -> LineBlock:
    """The messages as the lines of a block, one line break apart."""
    lengths = np.array([len(m) for m in messages], dtype=np.int64)
    ends = np.cumsum(lengths + 1) - 1
    return LineBlock(b"\n".join(messages), ends - lengths, ends, np.arange(1, len(messages) + 1))


def _check(messages: list[bytes], schemas: dict) -> bool:
    """Both batch paths agree with each other and with the per-message path; whether they read the batch."""
    block = _block(messages)
    by_lines = decode_stream_lines(block.data, block.starts, block.ends, schemas, MAX_BYTES)
    by_array = decode_stream_columns(block.binary_array(), schemas, MAX_BYTES)
    assert (by_lines is None) == (by_array is None)
    if by_lines is None:
        return False
    rows = [_per_message(m, schemas) for m in messages]
    assert all(row is not None for row in rows), "a batch path accepted a record the per-message path refuses"
    for stream, (positions, columns) in by_lines.items():
        other_positions, other_columns = by_array[stream]
        assert positions.tolist() == other_positions.tolist()
        assert [rows[p][0] for p in positions.tolist()] == [stream] * len(positions)
        for i, name in enumerate(schemas[stream].columns):
            assert columns[name].equals(other_columns[name])
            for p, value in zip(positions.tolist(), columns[name].to_pylist(), strict=True):
                assert same(rows[p][1][i], value), (stream, name, rows[p][1][i], value)
    return True


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.one_of(r_records, s_records), min_size=1, max_size=12),
    odd=st.lists(st.sampled_from(ODD), max_size=2),
    clash=st.booleans(),
)
def test_both_batch_paths_read_records_as_the_per_message_path_or_decline(records, odd, clash):
    messages = [orjson.dumps(r) for r in records]
    schemas = CLASHING if clash else SHARED
    _check(messages + odd, schemas)
    _check(odd + messages, schemas)


def test_each_odd_message_is_read_alike_or_declined():
    clean = orjson.dumps({"stream": "S", "t": 5, "k": 1, "x": 2, "b": False})
    for schemas in (SHARED, CLASHING):
        for message in ODD:
            _check([clean, message], schemas)


def test_plain_lines_are_read_at_once_with_one_read_or_one_per_stream():
    records = [{"stream": "R", "ts": i, "k": i % 7, "x": i / 3, "s": f"s{i}"} for i in range(500)]
    records += [{"stream": "S", "t": i, "k": i % 5, "x": i, "b": i % 2 == 0, "s": [i]} for i in range(500)]
    messages = [orjson.dumps(r) for r in records]
    assert _check(messages, SHARED) and _check(messages, CLASHING)
    assert not _check([*messages, b'{"stream":"R","ts":1,"k":1,"x":1.0,"s":"a","z":NaN}'], SHARED)
