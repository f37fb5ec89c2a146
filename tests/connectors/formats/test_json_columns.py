"""Batch JSON decoding (pyarrow's reader) agrees with the per-message path (orjson + StreamSchema.check) value for
value, or declines: it never accepts a record the per-message path refuses, nor reads one differently."""

from __future__ import annotations

import math

import orjson
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.json_messages import CODEC, MAX_BYTES, ODD_MESSAGES, extra_values, floats, ints, same, texts
from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_columns import decode_columns
from windjoin.operators.schema import MAX_SAFE_INT, RecordError, StreamSchema
from windjoin.operators.spec import StreamSpec

SCHEMA = StreamSchema(StreamSpec(fields={"k": "int", "x": "float", "s": "string", "b": "bool"}))

valid_records = st.fixed_dictionaries(
    {"ts": st.integers(0, MAX_SAFE_INT), "k": ints, "x": floats | ints, "s": texts, "b": st.booleans()},
    optional={"extra": extra_values, "s2": texts},
)


def _per_message(message: bytes | None) -> tuple | None:
    """The per-message path's row, or None when it refuses the message."""
    try:
        return SCHEMA.check(CODEC.decode(message))
    except (DecodeError, RecordError):
        return None


def _check_agreement(messages: list[bytes | None]) -> dict | None:
    columns = decode_columns(pa.array(messages, pa.binary()), SCHEMA, MAX_BYTES)
    if columns is None:
        return None
    rows = [_per_message(m) for m in messages]
    assert all(row is not None for row in rows), "the batch path accepted a record the per-message path refuses"
    for position, name in enumerate(SCHEMA.columns):
        for row, value in zip(rows, columns[name].to_pylist(), strict=True):
            assert same(row[position], value), (name, row[position], value)
    return columns


@settings(max_examples=300, deadline=None)
@given(records=st.lists(valid_records, min_size=1, max_size=20), odd=st.lists(st.sampled_from(ODD_MESSAGES)))
def test_the_batch_path_reads_every_record_as_the_per_message_path_or_declines(records, odd):
    messages = [orjson.dumps(r) for r in records]
    _check_agreement(messages + odd)
    _check_agreement(odd + messages)


def test_each_odd_message_is_read_alike_or_declined():
    clean = orjson.dumps({"ts": 5, "k": 1, "x": 0.5, "s": "q", "b": False})
    for message in ODD_MESSAGES:
        _check_agreement([clean, message])


def test_plain_batches_take_the_batch_path():
    records = [
        {"ts": 1_700_000_000_000 + i, "k": i * 7919 - 50_000, "x": i / 7, "s": f"user-{i}", "b": i % 2 == 0, "n": [i]}
        for i in range(2_000)
    ]
    records[5]["x"] = 3  # an int for a float field is a float
    columns = _check_agreement([orjson.dumps(r) for r in records])
    assert columns is not None and len(columns["k"]) == 2_000
    assert columns["x"].to_pylist()[5] == 3.0 and not math.isnan(columns["x"].to_pylist()[7])
