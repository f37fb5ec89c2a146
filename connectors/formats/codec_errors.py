"""The rejection vocabulary shared by the record codecs: reason names, DecodeError, EncodeError.

A message that cannot become a record is rejected with a machine-readable *reason* (a snake_case name
from the vocabulary below) and a human *detail*. The reason ends up in the dead-letter record, in metrics
labels and in alerts, so it must be one of a known set. Other modules (field validation, lateness) extend
the same vocabulary with :func:`register_reason` at import time, for example::

    LATE = register_reason("late")

The vocabulary is written only when a module registers its names; raising or handling a
:class:`DecodeError` never changes it, so one bad message cannot affect the decode of another.
"""

from __future__ import annotations

import re

# Reasons shared by every codec.
OVERSIZE = "oversize"
"""The message is longer than the codec's ``max_message_bytes`` (checked before any decoding)."""
NULL_VALUE = "null_value"
"""The message has no value at all (a Kafka tombstone, ``value() is None``)."""

# Avro in the Confluent wire format.
TRUNCATED = "truncated"
"""Fewer than the 5 bytes of the Confluent header (magic byte + 4-byte schema id)."""
BAD_MAGIC_BYTE = "bad_magic_byte"
"""The first byte is not the Confluent magic byte 0."""
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
"""The header names a schema id that neither the stream's schema files nor its schema registry hold usably."""
BAD_AVRO = "bad_avro"
"""The Avro body does not decode with the writer schema, or bytes remain after the record."""

# JSON.
NOT_UTF8 = "not_utf8"
"""The message is not valid UTF-8."""
NOT_JSON = "not_json"
"""The message is valid UTF-8 but not one JSON document."""
NOT_AN_OBJECT = "not_an_object"
"""The message is a JSON document whose top-level value is not an object."""

DEFAULT_MAX_MESSAGE_BYTES = 1_048_576
"""Default ``max_message_bytes`` of the codecs: 1 MiB, the order of Kafka's default ``message.max.bytes``."""


def check_max_message_bytes(max_message_bytes: object) -> int:
    """``max_message_bytes`` if it is a positive integer, else ValueError naming the bad value."""
    if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1:
        raise ValueError(f"max_message_bytes {max_message_bytes!r} is not a positive integer")
    return max_message_bytes


_REASON_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")

_known_reasons: set[str] = {
    OVERSIZE,
    NULL_VALUE,
    TRUNCATED,
    BAD_MAGIC_BYTE,
    UNKNOWN_SCHEMA_ID,
    BAD_AVRO,
    NOT_UTF8,
    NOT_JSON,
    NOT_AN_OBJECT,
}


def is_reason_name(name: object) -> bool:
    """Whether ``name`` is well formed as a reason: a snake_case string such as ``bad_avro``."""
    return isinstance(name, str) and _REASON_NAME.match(name) is not None


def register_reason(name: str) -> str:
    """Add ``name`` to the vocabulary (idempotent) and return it, for use as a module constant."""
    if not is_reason_name(name):
        raise ValueError(f"reason name {name!r} is not snake_case (accepted: [a-z][a-z0-9_]*)")
    _known_reasons.add(name)
    return name


def known_reasons() -> frozenset[str]:
    """The reasons registered so far (the built-in ones plus those other modules registered)."""
    return frozenset(_known_reasons)


class DecodeError(ValueError):
    """A message could not be turned into a record.

    ``reason`` is a registered reason name (machine-readable); ``detail`` says what was wrong, for people.
    Picklable, so it survives the trip from a Spark Python worker.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in _known_reasons:
            raise ValueError(
                f"unknown decode reason {reason!r}; known: {sorted(_known_reasons)} "
                "(register new ones with register_reason)"
            )
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


class EncodeError(ValueError):
    """A record could not be encoded in the codec's format (wrong field types, missing fields, too big)."""


def check_encoded_size(message: bytes, max_message_bytes: int) -> bytes:
    """`message`, or EncodeError when it is over the limit (both codecs refuse the same way)."""
    if len(message) > max_message_bytes:
        raise EncodeError(f"encoded message is {len(message)} bytes, over max_message_bytes={max_message_bytes}")
    return message


def check_decodable(data: bytes | bytearray | memoryview | None, max_message_bytes: int) -> None:
    """DecodeError for a tombstone or an oversize message, checked before any parsing."""
    if data is None:
        raise DecodeError(NULL_VALUE, "the message has no value (tombstone)")
    if len(data) > max_message_bytes:
        raise DecodeError(OVERSIZE, f"{len(data)} bytes, over max_message_bytes={max_message_bytes}")
