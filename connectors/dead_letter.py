"""The dead-letter record: a rejected Kafka message, why it was rejected and where it came from.

On the dead-letter topic a record is one JSON object (UTF-8, via orjson)::

    {"version": 1, "reason": "bad_avro", "detail": "...", "stream": "clicks", "topic": "clicks",
     "partition": 3, "offset": 1207, "key_b64": "a2V5" | null, "value_b64": "AAAAAAE..." | null,
     "dead_lettered_at": "2026-11-22T01:46:07.123456Z"}

The original key and value bytes are kept exactly (standard base64 with padding; ``null`` when the Kafka
message had no key or no value), so a fixed consumer can replay them. ``dead_lettered_at`` is an RFC 3339
UTC time with microseconds. :func:`decode_dead_letter` gives back a record equal to the one encoded.
The time is wall-clock, so a replayed batch dead-letters the same messages with a later time.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from windjoin.connectors.codec_errors import DecodeError, is_reason_name

DEAD_LETTER_VERSION = 1

_FIELDS = frozenset(
    {
        "version",
        "reason",
        "detail",
        "stream",
        "topic",
        "partition",
        "offset",
        "key_b64",
        "value_b64",
        "dead_lettered_at",
    }
)


def _as_bytes(name: str, value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise ValueError(f"{name} must be bytes or None, not {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A rejected message. ``key``/``value`` are the original bytes; ``dead_lettered_at`` is UTC-aware."""

    reason: str
    detail: str
    stream: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    dead_lettered_at: datetime

    def __post_init__(self) -> None:
        if not is_reason_name(self.reason):
            raise ValueError(f"reason {self.reason!r} is not a snake_case reason name")
        for name in ("detail", "stream", "topic"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a str, not {type(getattr(self, name)).__name__}")
        for name in ("stream", "topic"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for name in ("partition", "offset"):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"{name} {number!r} is not a non-negative integer")
        object.__setattr__(self, "key", _as_bytes("key", self.key))
        object.__setattr__(self, "value", _as_bytes("value", self.value))
        at = self.dead_lettered_at
        if not isinstance(at, datetime) or at.utcoffset() is None:
            raise ValueError(f"dead_lettered_at {at!r} must be a timezone-aware datetime")
        object.__setattr__(self, "dead_lettered_at", at.astimezone(UTC))

    @classmethod
    def from_error(
        cls,
        error: DecodeError,
        *,
        stream: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        at: datetime | None = None,
    ) -> DeadLetter:
        """The dead letter for a message whose decode raised ``error``; ``at`` defaults to now (UTC)."""
        return cls(
            reason=error.reason,
            detail=error.detail,
            stream=stream,
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            dead_lettered_at=datetime.now(UTC) if at is None else at,
        )


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(name: str, text: object) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"dead letter field {name!r} must be a base64 string or null")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"dead letter field {name!r} is not valid base64: {exc}") from exc


def encode_dead_letter(record: DeadLetter) -> bytes:
    """The JSON bytes of ``record`` for the dead-letter topic."""
    document: dict[str, Any] = {
        "version": DEAD_LETTER_VERSION,
        "reason": record.reason,
        "detail": record.detail,
        "stream": record.stream,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key_b64": _b64(record.key),
        "value_b64": _b64(record.value),
        "dead_lettered_at": record.dead_lettered_at,
    }
    return orjson.dumps(document, option=orjson.OPT_UTC_Z)


def decode_dead_letter(data: bytes | bytearray | memoryview) -> DeadLetter:
    """The record in a dead-letter message; ValueError naming the field if it is malformed."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"dead letter is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError("dead letter is not a JSON object")
    version = document.get("version")
    if version != DEAD_LETTER_VERSION:
        raise ValueError(f"dead letter version {version!r} is unsupported (accepted: {DEAD_LETTER_VERSION})")
    missing = _FIELDS - document.keys()
    extra = document.keys() - _FIELDS
    if missing or extra:
        raise ValueError(f"dead letter fields: missing {sorted(missing)}, unexpected {sorted(extra)}")
    at_text = document["dead_lettered_at"]
    if not isinstance(at_text, str):
        raise ValueError("dead letter field 'dead_lettered_at' must be an RFC 3339 string")
    try:
        at = datetime.fromisoformat(at_text)
    except ValueError as exc:
        raise ValueError(f"dead letter field 'dead_lettered_at' {at_text!r} is not an RFC 3339 time") from exc
    return DeadLetter(
        reason=document["reason"],
        detail=document["detail"],
        stream=document["stream"],
        topic=document["topic"],
        partition=document["partition"],
        offset=document["offset"],
        key=_unb64("key_b64", document["key_b64"]),
        value=_unb64("value_b64", document["value_b64"]),
        dead_lettered_at=at,
    )
