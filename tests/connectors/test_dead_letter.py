"""Dead-letter records: exact round trips through the JSON form, and rejection of malformed ones."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.connectors import codec_errors
from windjoin.connectors.codec_errors import DecodeError
from windjoin.connectors.dead_letter import DeadLetter, decode_dead_letter, encode_dead_letter
from windjoin.connectors.json_codec import JsonCodec

reason_names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
aware_times = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)
dead_letters = st.builds(
    DeadLetter,
    reason=reason_names,
    detail=st.text(),
    stream=st.text(min_size=1),
    topic=st.text(min_size=1),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | st.binary(),
    value=st.none() | st.binary(max_size=2000),
    dead_lettered_at=aware_times,
)


def sample(**overrides: Any) -> DeadLetter:
    fields: dict[str, Any] = {
        "reason": "bad_avro",
        "detail": "body does not decode",
        "stream": "clicks",
        "topic": "clicks-v1",
        "partition": 3,
        "offset": 1207,
        "key": b"user-17",
        "value": b"\x00\x00\x00\x00\x2a\xff",
        "dead_lettered_at": datetime(2026, 11, 22, 1, 46, 7, 123456, tzinfo=UTC),
    }
    fields.update(overrides)
    return DeadLetter(**fields)


@settings(max_examples=300, deadline=None)
@given(record=dead_letters)
def test_round_trip_is_exact(record: DeadLetter) -> None:
    decoded = decode_dead_letter(encode_dead_letter(record))
    assert decoded == record
    assert decoded.key == record.key and decoded.value == record.value  # byte for byte, None stays None
    assert decoded.dead_lettered_at == record.dead_lettered_at  # same instant, to the microsecond
    assert decoded.dead_lettered_at.utcoffset() == timedelta(0)


@settings(max_examples=100, deadline=None)
@given(record=dead_letters)
def test_encoded_form_is_plain_json_with_base64_bytes(record: DeadLetter) -> None:
    document = json.loads(encode_dead_letter(record).decode("utf-8"))
    for field, original in [("key_b64", record.key), ("value_b64", record.value)]:
        if original is None:
            assert document[field] is None
        else:
            assert base64.b64decode(document[field], validate=True) == original
    assert document["reason"] == record.reason
    assert (document["topic"], document["partition"], document["offset"]) == (
        record.topic,
        record.partition,
        record.offset,
    )
    assert datetime.fromisoformat(document["dead_lettered_at"]) == record.dead_lettered_at
    assert document["dead_lettered_at"].endswith("Z")


def test_known_encoding() -> None:
    document = json.loads(encode_dead_letter(sample()))
    assert document == {
        "version": 1,
        "reason": "bad_avro",
        "detail": "body does not decode",
        "stream": "clicks",
        "topic": "clicks-v1",
        "partition": 3,
        "offset": 1207,
        "key_b64": "dXNlci0xNw==",
        "value_b64": "AAAAACr/",
        "dead_lettered_at": "2026-11-22T01:46:07.123456Z",
    }


def test_a_non_utc_time_is_kept_as_the_same_instant() -> None:
    india = timezone(timedelta(hours=5, minutes=30))
    record = sample(dead_lettered_at=datetime(2026, 11, 22, 7, 16, 7, tzinfo=india))
    assert record.dead_lettered_at == datetime(2026, 11, 22, 1, 46, 7, tzinfo=UTC)
    assert json.loads(encode_dead_letter(record))["dead_lettered_at"] == "2026-11-22T01:46:07Z"


def test_from_a_real_decode_failure() -> None:
    bad_value = b'["not", "an", "object"]'
    with pytest.raises(DecodeError) as caught:
        JsonCodec().decode(bad_value)
    before = datetime.now(UTC)
    record = DeadLetter.from_error(
        caught.value, stream="views", topic="views", partition=0, offset=42, key=None, value=bad_value
    )
    after = datetime.now(UTC)
    assert record.reason == codec_errors.NOT_AN_OBJECT
    assert "array" in record.detail
    assert record.value == bad_value and record.key is None
    assert before <= record.dead_lettered_at <= after
    assert decode_dead_letter(encode_dead_letter(record)) == record


def test_buffers_are_kept_as_bytes() -> None:
    record = sample(key=bytearray(b"k"), value=memoryview(b"\x00v"))
    assert record.key == b"k" and type(record.key) is bytes
    assert record.value == b"\x00v" and type(record.value) is bytes


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"reason": "Bad Reason"}, "reason"),
        ({"reason": ""}, "reason"),
        ({"partition": -1}, "partition"),
        ({"offset": -5}, "offset"),
        ({"offset": True}, "offset"),
        ({"offset": 1.0}, "offset"),
        ({"stream": ""}, "stream"),
        ({"topic": 7}, "topic"),
        ({"key": "text, not bytes"}, "key"),
        ({"dead_lettered_at": datetime(2026, 1, 1)}, "timezone"),
        ({"dead_lettered_at": "2026-01-01T00:00:00Z"}, "timezone"),
    ],
)
def test_invalid_records_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sample(**overrides)


def _tampered(**changes: Any) -> bytes:
    document = json.loads(encode_dead_letter(sample()))
    for field, value in changes.items():
        if value is ...:
            del document[field]
        else:
            document[field] = value
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_tampered(version=2), "version"),
        (_tampered(version=...), "version"),
        (_tampered(offset=...), "offset"),
        (_tampered(surprise=1), "surprise"),
        (_tampered(key_b64="not base64!"), "key_b64"),
        (_tampered(value_b64=12), "value_b64"),
        (_tampered(dead_lettered_at="yesterday"), "dead_lettered_at"),
        (_tampered(dead_lettered_at="2026-11-22T01:46:07"), "timezone"),
        (_tampered(partition="3"), "partition"),
        (_tampered(reason="NOT A REASON"), "reason"),
    ],
)
def test_malformed_dead_letters_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_dead_letter(data)
