"""Checks on produced dead letters: their framed size against a topic's limit, and what a cut letter keeps."""

from __future__ import annotations

import hashlib

from windjoin.connectors.kafka.dead_letter import DeadLetter


def _varint_bytes(n: int) -> int:
    """Length of Kafka's zigzag varint for `n`."""
    n = (n << 1) ^ (n >> 63)
    return max(1, (n.bit_length() + 6) // 7)


def record_batch_bytes(key: bytes, value: bytes) -> int:
    """Size of a Kafka v2 record batch holding just this record (no headers, no compression): the 61-byte
    batch header, then the record with its varint length, attributes, time and offset deltas (0 alone in a
    batch), key and value with their lengths, and the header count."""
    body = 1 + 1 + 1 + _varint_bytes(len(key)) + len(key) + _varint_bytes(len(value)) + len(value) + 1
    return 61 + _varint_bytes(body) + body


def describes(letter: DeadLetter, part: str, original: bytes | None) -> bool:
    """True when the letter's key or value (`part`) is `original`, or a prefix of it with its size and digest."""
    kept = getattr(letter, part)
    if original is None:
        return kept is None and getattr(letter, f"{part}_size") is None
    return (
        kept is not None
        and original.startswith(kept)
        and getattr(letter, f"{part}_size") == len(original)
        and getattr(letter, f"{part}_sha256") == hashlib.sha256(original).hexdigest()
    )
