"""The dead-letter record: a rejected Kafka message, why it was rejected and where it came from.

On the dead-letter topic a record is one JSON object (UTF-8, via orjson)::

    {"version": 2, "reason": "bad_avro", "detail": "...", "stream": "clicks", "topic": "clicks",
     "partition": 3, "offset": 1207, "key_b64": "a2V5" | null, "value_b64": "AAAAAAE..." | null,
     "truncated": false, "key_size": 3 | null, "value_size": 1048 | null,
     "key_sha256": "2c70e1..." | null, "value_sha256": "9f86d0..." | null,
     "dead_lettered_at": "2026-11-22T01:46:07.123456Z"}

``key_b64``/``value_b64`` are the original key and value bytes (standard base64 with padding; ``null`` when the
Kafka message had no key or no value), so a fixed consumer can replay them. ``key_size``/``value_size`` are the
original lengths in bytes and ``key_sha256``/``value_sha256`` the lowercase hex SHA-256 of the original bytes.
``truncated`` is true when the letter does not carry everything: a letter that would not fit the dead-letter
topic's ``max.message.bytes`` keeps a prefix of the key and value (compare their lengths with the sizes; the
digests identify the originals) and a shortened ``detail``, which also happens to any detail over
``MAX_DETAIL_CHARS`` characters; a cut detail ends with ``CUT_MARK``. ``dead_lettered_at`` is an RFC 3339 UTC
time with microseconds. The time is wall-clock, so a replayed batch dead-letters the same messages with a later
time.

Version 1 letters (no ``truncated``, sizes or digests; always complete) are still read: :func:`decode_dead_letter`
gives both forms back as a :class:`DeadLetter`, with the sizes and digests of a complete letter computed from its
bytes. :func:`encode_dead_letter` writes version 2, and decoding gives back a record equal to the one encoded.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from windjoin.connectors.formats.codec_errors import DecodeError, is_reason_name

DEAD_LETTER_VERSION = 2
MAX_DETAIL_CHARS = 4096  # a detail may quote the refused value; a reason needs no more than this
CUT_MARK = " [cut]"

_V1_FIELDS = frozenset(
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
_ORIGINAL_FIELDS = ("truncated", "key_size", "value_size", "key_sha256", "value_sha256")
_FIELDS = {1: _V1_FIELDS, 2: _V1_FIELDS | set(_ORIGINAL_FIELDS)}
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _as_bytes(name: str, value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise ValueError(f"{name} must be bytes or None, not {type(value).__name__}")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A rejected message. ``key``/``value`` are the original bytes, or their prefixes when ``truncated``;
    ``key_size``/``value_size`` and ``key_sha256``/``value_sha256`` describe the originals (computed from the
    bytes when not truncated); ``dead_lettered_at`` is UTC-aware."""

    reason: str
    detail: str
    stream: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    dead_lettered_at: datetime
    truncated: bool = False
    key_size: int | None = None
    value_size: int | None = None
    key_sha256: str | None = None
    value_sha256: str | None = None

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
            if not _is_count(number):
                raise ValueError(f"{name} {number!r} is not a non-negative integer")
        object.__setattr__(self, "key", _as_bytes("key", self.key))
        object.__setattr__(self, "value", _as_bytes("value", self.value))
        at = self.dead_lettered_at
        if not isinstance(at, datetime) or at.utcoffset() is None:
            raise ValueError(f"dead_lettered_at {at!r} must be a timezone-aware datetime")
        object.__setattr__(self, "dead_lettered_at", at.astimezone(UTC))
        if not isinstance(self.truncated, bool):
            raise ValueError(f"truncated {self.truncated!r} must be true or false")
        for part in ("key", "value"):
            self._check_original(part)

    def _check_original(self, part: str) -> None:
        """Fill in or check the size and digest of the original key or value."""
        data, size, digest = getattr(self, part), getattr(self, f"{part}_size"), getattr(self, f"{part}_sha256")
        if data is None:
            if size is not None or digest is not None:
                raise ValueError(f"{part}_size and {part}_sha256 must be null when there is no {part}")
            return
        if self.truncated:
            if not _is_count(size):
                raise ValueError(f"{part}_size {size!r} must be the original's length (a truncated letter)")
            if not (isinstance(digest, str) and _SHA256_HEX.fullmatch(digest)):
                raise ValueError(f"{part}_sha256 {digest!r} is not a lowercase hex SHA-256")
            if len(data) > size:
                raise ValueError(f"{part} holds {len(data)} bytes, more than its {part}_size {size}")
            if len(data) < size:
                return  # a prefix: the digest is the original's, which the prefix cannot confirm
        actual_size, actual_digest = len(data), hashlib.sha256(data).hexdigest()
        if size is not None and size != actual_size:
            raise ValueError(f"{part}_size {size!r} is not the {part}'s length {actual_size}")
        if digest is not None and digest != actual_digest:
            raise ValueError(f"{part}_sha256 {digest!r} is not the SHA-256 of the {part}")
        object.__setattr__(self, f"{part}_size", actual_size)
        object.__setattr__(self, f"{part}_sha256", actual_digest)

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


def cut_detail(detail: str, max_chars: int) -> str:
    """``detail`` when it has at most ``max_chars`` characters, else its start ending in CUT_MARK, that long."""
    if len(detail) <= max_chars:
        return detail
    return (detail[: max(0, max_chars - len(CUT_MARK))] + CUT_MARK)[:max_chars]


def truncate(record: DeadLetter, key_bytes: int, value_bytes: int, detail_chars: int) -> DeadLetter:
    """``record`` flagged truncated, keeping the first bytes of its key and value and a cut detail; the sizes
    and digests stay those of the originals."""
    return dataclasses.replace(
        record,
        key=None if record.key is None else record.key[:key_bytes],
        value=None if record.value is None else record.value[:value_bytes],
        detail=cut_detail(record.detail, detail_chars),
        truncated=True,
    )


def _base64_chars(n: int) -> int:
    return 4 * -(-n // 3)


def fit_dead_letter(record: DeadLetter, max_bytes: int) -> bytes:
    """The encoded letter in at most ``max_bytes``: complete when it fits, else truncated (see the module doc).

    The key keeps what it needs up to half the room left for bytes, the value the rest. ValueError when even a
    letter with an empty key, value and detail is longer than ``max_bytes``.
    """
    if len(record.detail) > MAX_DETAIL_CHARS:
        record = truncate(record, len(record.key or b""), len(record.value or b""), MAX_DETAIL_CHARS)
    encoded = encode_dead_letter(record)
    if len(encoded) <= max_bytes:
        return encoded
    detail_chars = len(record.detail)
    skeleton = encode_dead_letter(truncate(record, 0, 0, detail_chars))
    while len(skeleton) > max_bytes and detail_chars > 0:  # JSON escapes make a character cost 1-6 bytes
        detail_chars //= 2
        skeleton = encode_dead_letter(truncate(record, 0, 0, detail_chars))
    if len(skeleton) > max_bytes:
        raise ValueError(
            f"a dead letter needs {len(skeleton)} bytes without key, value and detail, over the limit of {max_bytes}"
        )
    room = max_bytes - len(skeleton)  # base64 text is never escaped in JSON: each byte of it costs one
    key_len, value_len = len(record.key or b""), len(record.value or b"")
    capacity = room // 4 * 3
    key_keep = min(key_len, max(capacity // 2, capacity - value_len))
    value_keep = min(value_len, (room - _base64_chars(key_keep)) // 4 * 3)
    fitted = encode_dead_letter(truncate(record, key_keep, value_keep, detail_chars))
    assert len(fitted) <= max_bytes, (len(fitted), max_bytes)
    return fitted


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
    """The JSON bytes of ``record`` for the dead-letter topic (version 2), whatever its size."""
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
        "truncated": record.truncated,
        "key_size": record.key_size,
        "value_size": record.value_size,
        "key_sha256": record.key_sha256,
        "value_sha256": record.value_sha256,
        "dead_lettered_at": record.dead_lettered_at,
    }
    return orjson.dumps(document, option=orjson.OPT_UTC_Z)


def decode_dead_letter(data: bytes | bytearray | memoryview) -> DeadLetter:
    """The record in a dead-letter message of version 1 or 2; ValueError naming the field if it is malformed."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"dead letter is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError("dead letter is not a JSON object")
    version = document.get("version")
    if type(version) is not int or version not in _FIELDS:
        raise ValueError(f"dead letter version {version!r} is unsupported (accepted: {sorted(_FIELDS)})")
    missing = _FIELDS[version] - document.keys()
    extra = document.keys() - _FIELDS[version]
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
        **{name: document[name] for name in _ORIGINAL_FIELDS if name in document},
    )
