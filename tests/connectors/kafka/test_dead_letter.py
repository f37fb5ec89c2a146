"""Dead-letter records: exact round trips through the JSON form, letters cut to fit a byte limit (truncated,
flagged, with the originals' sizes and digests), version 1 letters still read, and rejection of malformed ones."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windjoin.connectors.formats import codec_errors
from windjoin.connectors.formats.codec_errors import DecodeError
from windjoin.connectors.formats.json_codec import JsonCodec
from windjoin.connectors.kafka.dead_letter import (
    CUT_MARK,
    MAX_DETAIL_CHARS,
    DeadLetter,
    decode_dead_letter,
    encode_dead_letter,
    fit_dead_letter,
)

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
        "version": 2,
        "reason": "bad_avro",
        "detail": "body does not decode",
        "stream": "clicks",
        "topic": "clicks-v1",
        "partition": 3,
        "offset": 1207,
        "key_b64": "dXNlci0xNw==",
        "value_b64": "AAAAACr/",
        "truncated": False,
        "key_size": 7,
        "value_size": 6,
        "key_sha256": hashlib.sha256(b"user-17").hexdigest(),
        "value_sha256": hashlib.sha256(b"\x00\x00\x00\x00\x2a\xff").hexdigest(),
        "dead_lettered_at": "2026-11-22T01:46:07.123456Z",
    }


def test_a_version_1_letter_is_still_read() -> None:
    """Letters written before version 2 (no sizes, digests or flag) decode, complete, with sizes and digests."""
    v1 = {
        "version": 1,
        "reason": "bad_avro",
        "detail": "body does not decode",
        "stream": "clicks",
        "topic": "clicks-v1",
        "partition": 3,
        "offset": 1207,
        "key_b64": "dXNlci0xNw==",
        "value_b64": None,
        "dead_lettered_at": "2026-11-22T01:46:07.123456Z",
    }
    letter = decode_dead_letter(json.dumps(v1).encode())
    assert letter == sample(value=None)
    assert not letter.truncated
    assert (letter.key_size, letter.key_sha256) == (7, hashlib.sha256(b"user-17").hexdigest())
    assert (letter.value_size, letter.value_sha256) == (None, None)


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
        (_tampered(version=3), "version"),
        (_tampered(version=True), "version"),
        (_tampered(truncated=...), "truncated"),
        (_tampered(truncated="no"), "truncated"),
        (_tampered(value_size=5), "value_size"),
        (_tampered(key_sha256="0" * 64), "key_sha256"),
        (_tampered(truncated=True, value_size=None), "value_size"),
        (_tampered(truncated=True, value_size=2), "value_size"),
        (_tampered(truncated=True, key_sha256="ABC"), "key_sha256"),
        (_tampered(key_b64=None), "key_size"),
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


def _assert_describes(letter: DeadLetter, original: DeadLetter) -> None:
    """``letter`` (decoded) is ``original`` or a flagged cut of it: prefixes, the originals' sizes and digests."""
    for part in ("key", "value"):
        kept, whole = getattr(letter, part), getattr(original, part)
        if whole is None:
            assert kept is None
            continue
        assert whole.startswith(kept)
        assert getattr(letter, f"{part}_size") == len(whole)
        assert getattr(letter, f"{part}_sha256") == hashlib.sha256(whole).hexdigest()
    assert (letter.reason, letter.stream, letter.topic, letter.partition, letter.offset) == (
        original.reason,
        original.stream,
        original.topic,
        original.partition,
        original.offset,
    )
    assert letter.dead_lettered_at == original.dead_lettered_at
    if letter.detail != original.detail:
        assert letter.detail.endswith(CUT_MARK)
        assert original.detail.startswith(letter.detail.removesuffix(CUT_MARK))


@settings(max_examples=300, deadline=None)
@given(
    record=dead_letters,
    big_value=st.none() | st.integers(0, 300_000),
    big_detail=st.integers(0, 20_000),
    max_bytes=st.integers(600, 400_000),
)
def test_a_fitted_letter_is_within_the_limit_and_describes_the_original(
    record: DeadLetter, big_value: int | None, big_detail: int, max_bytes: int
) -> None:
    """Whatever the sizes of key, value and detail (escaped characters included): the letter fits, and it is
    complete and unflagged exactly when the complete letter (with a detail within bounds) fits."""
    if big_value is not None:
        record = sample(value=bytes(range(256)) * (big_value // 256), detail="\x01é" * big_detail)
    fitted = fit_dead_letter(record, max_bytes)
    assert len(fitted) <= max_bytes
    letter = decode_dead_letter(fitted)
    _assert_describes(letter, record)
    complete = len(record.detail) <= MAX_DETAIL_CHARS and len(encode_dead_letter(record)) <= max_bytes
    assert letter.truncated is not complete
    if complete:
        assert letter == record


def test_an_oversize_value_is_cut_to_fill_the_limit() -> None:
    value = b"\xff" * 1_500_000
    fitted = fit_dead_letter(sample(value=value, detail="x" * 1_000_000), 1_048_000)
    letter = decode_dead_letter(fitted)
    assert letter.truncated and letter.value_size == 1_500_000
    assert letter.value_sha256 == hashlib.sha256(value).hexdigest()
    assert letter.key == b"user-17"  # a short key is kept whole
    assert len(letter.detail) == MAX_DETAIL_CHARS and letter.detail.endswith(CUT_MARK)
    assert 1_048_000 - 4 <= len(fitted) <= 1_048_000  # the room goes to the value, to the last base64 quantum
    assert len(letter.value) > 780_000


def test_a_huge_key_gets_at_most_half_the_room() -> None:
    letter = decode_dead_letter(fit_dead_letter(sample(key=b"k" * 100_000, value=b"v" * 100_000), 20_000))
    assert letter.truncated and 0 < len(letter.key) <= len(letter.value) + 3  # up to one base64 quantum


def test_a_long_detail_is_cut_even_when_the_letter_fits() -> None:
    letter = decode_dead_letter(fit_dead_letter(sample(detail="d" * 50_000), 1_000_000))
    assert letter.truncated and len(letter.detail) == MAX_DETAIL_CHARS
    assert letter.value == sample().value and letter.value_size == len(letter.value)


def test_a_limit_too_small_for_the_fixed_fields_is_refused() -> None:
    with pytest.raises(ValueError, match="over the limit of 100"):
        fit_dead_letter(sample(), 100)
