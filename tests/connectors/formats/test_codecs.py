"""Record codecs: round trips, one test per rejection reason on real malformed bytes, wire compatibility."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.connectors.formats import codec_errors
from windjoin.connectors.formats.avro_codec import (
    AvroCodec,
    SchemaConflictError,
    SchemaRegistry,
    derived_schema_id,
)
from windjoin.connectors.formats.codec import codec_for
from windjoin.connectors.formats.codec_errors import DecodeError, EncodeError
from windjoin.connectors.formats.json_codec import JsonCodec

EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "windjoin.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "small", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "name", "type": "string"},
        {"name": "ok", "type": "boolean"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "maybe_ts", "type": ["null", "long"]},
        {"name": "payload", "type": "bytes"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    ],
}

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

event_records = st.fixed_dictionaries(
    {
        "id": INT64,
        "small": INT32,
        "price": st.floats(allow_nan=False),
        "ratio": st.floats(width=32, allow_nan=False),
        "name": st.text(),
        "ok": st.booleans(),
        "note": st.none() | st.text(),
        "maybe_ts": st.none() | INT64,
        "payload": st.binary(),
        "tags": st.lists(st.text(), max_size=5),
        "attrs": st.dictionaries(st.text(), INT64, max_size=5),
        "kind": st.sampled_from(["A", "B", "C"]),
    }
)

json_values = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)
json_records = st.dictionaries(st.text(), json_values, max_size=8)


def assert_identical(actual: Any, expected: Any) -> None:
    """Equal values of the same types all the way down (1 is not 1.0, -0.0 is not 0.0, True is not 1)."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, float):
        assert math.copysign(1.0, actual) == math.copysign(1.0, expected), (actual, expected)
        assert actual == expected or (math.isnan(actual) and math.isnan(expected)), (actual, expected)
    elif isinstance(expected, dict):
        assert set(actual) == set(expected)
        for key in expected:
            assert_identical(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_identical(a, e)
    else:
        assert actual == expected


@pytest.fixture
def registry() -> SchemaRegistry:
    return SchemaRegistry()


@pytest.fixture
def avro(registry: SchemaRegistry) -> AvroCodec:
    return AvroCodec(registry, registry.register(EVENT_SCHEMA, schema_id=42))


def sample_event(**overrides: Any) -> dict[str, Any]:
    event = {
        "id": 7,
        "small": -3,
        "price": 19.5,
        "ratio": 0.25,
        "name": "Zoë 🚀",
        "ok": True,
        "note": None,
        "maybe_ts": 1_700_000_000_000,
        "payload": b"\x00\x01\xff",
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "kind": "B",
    }
    event.update(overrides)
    return event


def reason_of(codec: Any, data: Any) -> str:
    with pytest.raises(DecodeError) as caught:
        codec.decode(data)
    assert caught.value.detail  # a human-readable explanation is always present
    return caught.value.reason


# --- round trips -------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(record=event_records)
def test_avro_round_trip(record: dict[str, Any]) -> None:
    registry = SchemaRegistry()
    codec = AvroCodec(registry, registry.register(EVENT_SCHEMA))
    assert_identical(codec.decode(codec.encode(record)), record)


@settings(max_examples=300, deadline=None)
@given(record=json_records)
def test_json_round_trip(record: dict[str, Any]) -> None:
    codec = JsonCodec()
    message = codec.encode(record)
    assert_identical(codec.decode(message), record)
    assert json.loads(message.decode("utf-8")) == record  # readable by any JSON parser


@settings(max_examples=100, deadline=None)
@given(record=json_records)
def test_codec_for_gives_working_codecs_without_branching(record: dict[str, Any]) -> None:
    registry = SchemaRegistry()
    avro_id = registry.register(EVENT_SCHEMA)
    avro_record = sample_event(name=str(record)[:50])
    for codec, value in [
        (codec_for("json"), record),
        (codec_for("avro", registry=registry, schema_id=avro_id), avro_record),
    ]:
        assert_identical(codec.decode(codec.encode(value)), value)


def test_avro_fills_defaults_for_missing_fields(registry: SchemaRegistry) -> None:
    schema = {
        "type": "record",
        "name": "WithDefaults",
        "fields": [
            {"name": "a", "type": "long"},
            {"name": "b", "type": "string", "default": "dflt"},
            {"name": "c", "type": ["null", "long"], "default": None},
        ],
    }
    codec = AvroCodec(registry, registry.register(schema))
    assert codec.decode(codec.encode({"a": 5})) == {"a": 5, "b": "dflt", "c": None}


def test_avro_decodes_any_registered_writer_schema(registry: SchemaRegistry) -> None:
    other = {"type": "record", "name": "Other", "fields": [{"name": "k", "type": "string"}]}
    event_id = registry.register(EVENT_SCHEMA)
    other_id = registry.register(other)
    writer_of_other = AvroCodec(registry, other_id)
    reader = AvroCodec(registry, event_id)
    assert reader.decode(writer_of_other.encode({"k": "v"})) == {"k": "v"}


def test_codecs_survive_pickling(avro: AvroCodec) -> None:
    """Spark ships the codec to executors by pickling it."""
    record = sample_event()
    for codec, value in [(avro, record), (JsonCodec(max_message_bytes=100), {"a": [1, 2.5, None]})]:
        message = codec.encode(value)
        clone = pickle.loads(pickle.dumps(codec))
        assert clone.decode(message) == value
        assert clone.encode(value) == message


# --- Confluent wire format --------------------------------------------------------------------------------


def test_avro_message_is_confluent_wire_format(avro: AvroCodec) -> None:
    record = sample_event()
    message = avro.encode(record)
    assert message[0] == 0  # magic byte
    assert message[1:5] == b"\x00\x00\x00\x2a"  # schema id 42, 4 bytes big-endian
    body = io.BytesIO(message[5:])
    assert schemaless_reader(body, parse_schema(EVENT_SCHEMA)) == record
    assert body.tell() == len(message) - 5


def test_avro_decodes_a_hand_built_confluent_message(avro: AvroCodec) -> None:
    record = sample_event(note="hand built")
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(EVENT_SCHEMA), record)
    message = struct.pack(">bI", 0, 42) + body.getvalue()
    assert avro.decode(message) == record
    assert avro.decode(bytearray(message)) == record
    assert avro.decode(memoryview(message)) == record


# --- schema registry and ids ------------------------------------------------------------------------------

CLICK_AVSC = """
{
  "type": "record", "name": "Click", "namespace": "windjoin.test",
  "doc": "a click",
  "fields": [{"name": "user", "type": "long", "doc": "who"}, {"name": "url", "type": "string"}]
}
"""
# The Parsing Canonical Form of CLICK_AVSC, written by hand from the Avro specification.
CLICK_PCF = (
    '{"name":"windjoin.test.Click","type":"record",'
    '"fields":[{"name":"user","type":"long"},{"name":"url","type":"string"}]}'
)


def test_derived_schema_id_is_sha256_of_the_canonical_form(tmp_path: Path) -> None:
    path = tmp_path / "click.avsc"
    path.write_text(CLICK_AVSC)
    expected = int.from_bytes(hashlib.sha256(CLICK_PCF.encode()).digest()[:4], "big") & 0x7FFFFFFF
    registry = SchemaRegistry()
    assert registry.load_avsc(path) == expected
    assert registry.canonical_form(expected) == CLICK_PCF
    assert derived_schema_id(CLICK_AVSC) == expected


def test_derived_schema_id_is_stable_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "click.avsc"
    path.write_text(CLICK_AVSC)
    program = textwrap.dedent(
        f"""
        from windjoin.connectors.formats.avro_codec import SchemaRegistry
        print(SchemaRegistry().load_avsc({str(path)!r}))
        """
    )
    ids = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
        ids.add(int(done.stdout))
    assert ids == {SchemaRegistry().load_avsc(path)}


def test_derived_id_ignores_docs_and_whitespace_but_not_structure() -> None:
    base = json.loads(CLICK_AVSC)
    undocumented = {k: v for k, v in base.items() if k != "doc"}
    reordered_fields = {**base, "fields": list(reversed(base["fields"]))}
    assert derived_schema_id(json.dumps(undocumented, indent=4)) == derived_schema_id(CLICK_AVSC)
    assert derived_schema_id(reordered_fields) != derived_schema_id(CLICK_AVSC)


def test_explicit_schema_id_and_conflicts(tmp_path: Path) -> None:
    path = tmp_path / "click.avsc"
    path.write_text(CLICK_AVSC)
    registry = SchemaRegistry()
    assert registry.load_avsc(path, schema_id=7) == 7
    assert registry.load_avsc(path, schema_id=7) == 7  # re-loading the same schema is harmless
    with pytest.raises(SchemaConflictError, match="7"):
        registry.register(EVENT_SCHEMA, schema_id=7)
    assert registry.ids() == [7]
    for bad_id in (-1, 2**31, "7", True):
        with pytest.raises(ValueError, match="schema_id"):
            registry.register(EVENT_SCHEMA, schema_id=bad_id)


def test_load_avsc_resolves_named_types_from_sibling_files(tmp_path: Path) -> None:
    (tmp_path / "windjoin.test.Point.avsc").write_text(
        '{"type": "record", "name": "Point", "namespace": "windjoin.test",'
        ' "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"}]}'
    )
    (tmp_path / "windjoin.test.Trip.avsc").write_text(
        '{"type": "record", "name": "Trip", "namespace": "windjoin.test",'
        ' "fields": [{"name": "start", "type": "windjoin.test.Point"}, {"name": "end", "type": "Point"}]}'
    )
    registry = SchemaRegistry()
    codec = AvroCodec(registry, registry.load_avsc(tmp_path / "windjoin.test.Trip.avsc"))
    trip = {"start": {"x": 1.0, "y": 2.0}, "end": {"x": -1.5, "y": 0.0}}
    assert codec.decode(codec.encode(trip)) == trip


def test_registry_rejects_bad_schemas(tmp_path: Path) -> None:
    registry = SchemaRegistry()
    broken = tmp_path / "broken.avsc"
    broken.write_text('{"type": "record", "name": "B", "fields": [')
    with pytest.raises(ValueError, match="broken.avsc"):
        registry.load_avsc(broken)
    with pytest.raises(ValueError, match="record"):
        registry.register('"long"')
    with pytest.raises(ValueError, match="not a valid Avro schema"):
        registry.register({"type": "record", "name": "U", "fields": [{"name": "a", "type": "no_such_type"}]})
    with pytest.raises(FileNotFoundError):
        registry.load_avsc(tmp_path / "missing.avsc")
    assert len(registry) == 0


# --- Avro rejection reasons ---------------------------------------------------------------------------------


def test_avro_bad_magic_byte(avro: AvroCodec) -> None:
    message = bytearray(avro.encode(sample_event()))
    message[0] = 1
    assert reason_of(avro, bytes(message)) == codec_errors.BAD_MAGIC_BYTE


def test_avro_truncated(avro: AvroCodec) -> None:
    message = avro.encode(sample_event())
    for cut in (0, 1, 4):
        assert reason_of(avro, message[:cut]) == codec_errors.TRUNCATED


def test_avro_unknown_schema_id(avro: AvroCodec) -> None:
    message = avro.encode(sample_event())
    assert reason_of(avro, b"\x00\x00\x00\x00\x2b" + message[5:]) == codec_errors.UNKNOWN_SCHEMA_ID


def test_avro_bad_body(avro: AvroCodec) -> None:
    good = avro.encode(sample_event(kind="C"))
    # the body cut short: the last field (enum index) is missing
    assert reason_of(avro, good[:-1]) == codec_errors.BAD_AVRO
    # a header with no body at all
    assert reason_of(avro, good[:5]) == codec_errors.BAD_AVRO
    # trailing garbage after a complete record
    assert reason_of(avro, good + b"\x00") == codec_errors.BAD_AVRO
    # the enum index flipped to one the schema does not have (zigzag 0x7e = 63)
    assert reason_of(avro, good[:-1] + b"\x7e") == codec_errors.BAD_AVRO
    # invalid UTF-8 inside a string field
    string_schema = {"type": "record", "name": "N", "fields": [{"name": "s", "type": "string"}]}
    only_name = AvroCodec(avro.registry, avro.registry.register(string_schema, schema_id=5))
    message = bytearray(only_name.encode({"s": "ab"}))
    message[-1] = 0xFF
    assert reason_of(only_name, bytes(message)) == codec_errors.BAD_AVRO


@settings(max_examples=300, deadline=None)
@given(record=event_records, data=st.data())
def test_avro_corrupted_body_never_escapes_as_another_exception(record: dict[str, Any], data: Any) -> None:
    registry = SchemaRegistry()
    codec = AvroCodec(registry, registry.register(EVENT_SCHEMA))
    message = bytearray(codec.encode(record))
    position = data.draw(st.integers(5, len(message) - 1))
    message[position] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(5, len(message)))
    try:
        codec.decode(bytes(message[:cut]))
    except DecodeError as error:
        assert error.reason == codec_errors.BAD_AVRO


def test_avro_oversize_is_checked_before_decoding(registry: SchemaRegistry) -> None:
    codec = AvroCodec(registry, registry.register(EVENT_SCHEMA), max_message_bytes=64)
    message = codec.encode(sample_event())
    big = AvroCodec(registry, registry.register(EVENT_SCHEMA)).encode(sample_event(name="x" * 100))
    assert reason_of(codec, big) == codec_errors.OVERSIZE
    assert reason_of(codec, b"\x07" * 65) == codec_errors.OVERSIZE  # also a bad magic byte, never looked at
    assert codec.decode(message) == sample_event()


def test_avro_null_value(avro: AvroCodec) -> None:
    assert reason_of(avro, None) == codec_errors.NULL_VALUE


def test_avro_encode_rejects_records_that_do_not_fit(avro: AvroCodec) -> None:
    for bad in [
        {k: v for k, v in sample_event().items() if k != "name"},  # required field missing
        sample_event(small=2**31),  # out of int32 range
        sample_event(id="7"),  # wrong type
        sample_event(ok=1),  # not a boolean
        sample_event(kind="Z"),  # not a symbol
        {**sample_event(), "extra": 1},  # a field the schema does not name is never silently dropped
    ]:
        with pytest.raises(EncodeError):
            avro.encode(bad)
    with pytest.raises(EncodeError, match="mapping"):
        avro.encode([1, 2])  # type: ignore[arg-type]


def test_avro_encode_rejects_oversize_messages(registry: SchemaRegistry) -> None:
    codec = AvroCodec(registry, registry.register(EVENT_SCHEMA), max_message_bytes=64)
    with pytest.raises(EncodeError, match="max_message_bytes"):
        codec.encode(sample_event(name="x" * 100))


# --- JSON rejection reasons ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message", [b"", b"   ", b'{"a": 1', b"{'a': 1}", b"NaN", b'{"a": 1} {"b": 2}', b"\xef\xbb\xbf{}"]
)
def test_json_not_json(message: bytes) -> None:
    assert reason_of(JsonCodec(), message) == codec_errors.NOT_JSON


@pytest.mark.parametrize("message", [b"[1, 2]", b'"text"', b"3", b"4.5", b"true", b"null", b"[]"])
def test_json_not_an_object(message: bytes) -> None:
    assert reason_of(JsonCodec(), message) == codec_errors.NOT_AN_OBJECT


@pytest.mark.parametrize(
    "message",
    [
        b'{"a": "\xff"}',  # a byte that never occurs in UTF-8
        b'{"a": "\xc3"}',  # a truncated two-byte sequence
        b'{"a": "\xc0\xaf"}',  # an overlong encoding of "/"
        b'{"a": "\xed\xa0\x80"}',  # an encoded surrogate
        '{"a": "caf\u00e9"}'.encode("latin-1"),  # Latin-1, not UTF-8
    ],
)
def test_json_not_utf8(message: bytes) -> None:
    assert reason_of(JsonCodec(), message) == codec_errors.NOT_UTF8


def test_json_oversize_is_checked_before_decoding() -> None:
    codec = JsonCodec(max_message_bytes=16)
    assert codec.decode(b'{"a": "0123456"}') == {"a": "0123456"}  # exactly 16 bytes
    assert reason_of(codec, b'{"a": "01234567"}') == codec_errors.OVERSIZE
    assert reason_of(codec, b"\xff" * 17) == codec_errors.OVERSIZE


def test_json_null_value() -> None:
    assert reason_of(JsonCodec(), None) == codec_errors.NULL_VALUE


def test_json_decode_accepts_buffers() -> None:
    assert JsonCodec().decode(bytearray(b'{"k": [1]}')) == {"k": [1]}
    assert JsonCodec().decode(memoryview(b'{"k": [1]}')) == {"k": [1]}


@pytest.mark.parametrize(
    "record",
    [
        {"x": float("nan")},
        {"x": [1.0, float("inf")]},
        {"x": {"y": -float("inf")}},
        {"big": 2**64},
        {1: "non-string key"},
        {"s": "\ud800"},  # a lone surrogate has no UTF-8 form
    ],
)
def test_json_encode_rejects_what_json_cannot_carry_exactly(record: dict[Any, Any]) -> None:
    with pytest.raises(EncodeError):
        JsonCodec().encode(record)


def test_json_encode_rejects_non_mappings_and_oversize() -> None:
    with pytest.raises(EncodeError, match="mapping"):
        JsonCodec().encode([1])  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="max_message_bytes"):
        JsonCodec(max_message_bytes=8).encode({"a": "long enough"})


# --- isolation between messages -----------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    records=st.lists(event_records, min_size=1, max_size=6),
    garbage=st.lists(st.binary(max_size=40) | st.none(), min_size=1, max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_a_bad_message_never_affects_the_others(
    records: list[dict[str, Any]], garbage: list[bytes | None], order: Any
) -> None:
    registry = SchemaRegistry()
    avro = AvroCodec(registry, registry.register(EVENT_SCHEMA))
    json_codec = JsonCodec()
    for codec, originals in [
        (avro, records),
        (json_codec, [{"i": i, "name": r["name"]} for i, r in enumerate(records)]),
    ]:
        good = [(codec.encode(r), r) for r in originals]
        bad: list[tuple[bytes | None, None]] = [(g, None) for g in garbage]
        mixed = good + bad
        order.shuffle(mixed)
        decoded_good = []
        for message, original in mixed:
            try:
                decoded = codec.decode(message)
            except DecodeError:
                assert original is None
                continue
            if original is not None:
                decoded_good.append((decoded, original))
        assert len(decoded_good) == len(good)
        for decoded, original in decoded_good:
            assert_identical(decoded, original)


# --- the factory and the shared vocabulary ------------------------------------------------------------------


def test_codec_for_rejects_unknown_formats_and_options(registry: SchemaRegistry) -> None:
    with pytest.raises(ValueError, match="'avro', 'json'") as caught:
        codec_for("protobuf")
    assert "protobuf" in str(caught.value)
    with pytest.raises(ValueError, match="schema_id"):
        codec_for("avro", registry=registry)
    with pytest.raises(ValueError, match="max_message_bytes"):
        codec_for("json", max_bytes=10)
    with pytest.raises(ValueError, match="max_message_bytes"):
        codec_for("json", max_message_bytes=0)
    with pytest.raises(ValueError, match="not in the registry"):
        codec_for("avro", registry=registry, schema_id=3)


def test_codec_for_passes_options_through(registry: SchemaRegistry) -> None:
    small_json = codec_for("json", max_message_bytes=10)
    assert reason_of(small_json, b'{"a": "0123456789"}') == codec_errors.OVERSIZE
    small_avro = codec_for("avro", registry=registry, schema_id=registry.register(EVENT_SCHEMA), max_message_bytes=10)
    assert reason_of(small_avro, b"\x00" * 11) == codec_errors.OVERSIZE


def test_decode_error_is_picklable_and_keeps_its_reason() -> None:
    error = DecodeError(codec_errors.BAD_AVRO, "body does not decode")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.reason, clone.detail, str(clone)) == (
        "bad_avro",
        "body does not decode",
        "bad_avro: body does not decode",
    )
    assert isinstance(clone, ValueError)


def test_other_modules_can_extend_the_reason_vocabulary() -> None:
    with pytest.raises(ValueError, match="unknown decode reason"):
        DecodeError("test_only_missing_field", "field 'ts' is missing")
    name = codec_errors.register_reason("test_only_missing_field")
    assert codec_errors.register_reason(name) == name  # idempotent
    assert DecodeError(name, "field 'ts' is missing").reason == "test_only_missing_field"
    assert name in codec_errors.known_reasons()
    for bad_name in ("Late", "bad-name", "", "1st"):
        with pytest.raises(ValueError, match="snake_case"):
            codec_errors.register_reason(bad_name)


def _zigzag_varint(number: int) -> bytes:
    encoded = (number << 1) ^ (number >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def test_a_huge_claimed_array_length_is_bad_avro_not_a_hang(registry: SchemaRegistry) -> None:
    schema = {"type": "record", "name": "L", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}]}
    codec = AvroCodec(registry, registry.register(schema, schema_id=9))
    message = b"\x00\x00\x00\x00\x09" + _zigzag_varint(2**40) + b"\x02\x04" + _zigzag_varint(0)
    assert reason_of(codec, message) == codec_errors.BAD_AVRO


@pytest.mark.parametrize(
    "items",
    [
        "null",
        {"type": "record", "name": "Empty", "fields": []},
        {"type": "record", "name": "OnlyNull", "fields": [{"name": "n", "type": "null"}]},
        {"type": "fixed", "name": "Nothing", "size": 0},
    ],
)
def test_schemas_with_zero_width_array_items_are_refused(items: Any) -> None:
    """Each such item takes no bytes, so a 12-byte message could make the decoder build 2**40 items."""
    schema = {"type": "record", "name": "Z", "fields": [{"name": "a", "type": {"type": "array", "items": items}}]}
    with pytest.raises(ValueError, match="zero bytes"):
        SchemaRegistry().register(schema)


def test_avro_without_record_validation_still_round_trips_and_refuses_missing_fields(
    registry: SchemaRegistry,
) -> None:
    codec = codec_for("avro", registry=registry, schema_id=registry.register(EVENT_SCHEMA), validate_records=False)
    assert codec.decode(codec.encode(sample_event())) == sample_event()
    with pytest.raises(EncodeError):
        codec.encode({k: v for k, v in sample_event().items() if k != "id"})
    with pytest.raises(EncodeError):
        codec.encode({**sample_event(), "extra": 1})
