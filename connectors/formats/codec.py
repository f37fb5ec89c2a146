"""Pick a record codec by format name, so callers never branch on the format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from windjoin.connectors.formats.avro_codec import AvroCodec
from windjoin.connectors.formats.json_codec import JsonCodec

FORMATS = ("avro", "json")

_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # format: (required options, optional options)
    "avro": (frozenset({"registry", "schema_id"}), frozenset({"max_message_bytes", "validate_records"})),
    "json": (frozenset(), frozenset({"max_message_bytes"})),
}


class Codec(Protocol):
    """What every codec offers: a format name, ``encode`` and ``decode``."""

    format: str

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The message bytes of ``record`` (EncodeError if it cannot be encoded)."""
        ...

    def decode(self, data: bytes | bytearray | memoryview | None) -> dict[str, Any]:
        """The record in ``data`` (DecodeError, with a reason, if it is malformed)."""
        ...


def codec_for(format: str, **options: Any) -> Codec:
    """A codec for ``format`` (``"avro"`` or ``"json"``) built from keyword ``options``.

    ``avro``: ``registry`` (an ``avro_codec.SchemaRegistry``), ``schema_id`` (the writer schema of
    ``encode``, None for a decoder only; ``decode`` accepts any id the registry finds), optional
    ``max_message_bytes`` and ``validate_records``.
    ``json``: optional ``max_message_bytes``.
    Unknown formats, unknown options and missing options raise ValueError naming what is accepted.
    """
    if format not in _OPTIONS:
        raise ValueError(f"unknown record format {format!r}; accepted: {', '.join(map(repr, FORMATS))}")
    required, optional = _OPTIONS[format]
    unknown = set(options) - required - optional
    if unknown:
        accepted = sorted(required | optional)
        raise ValueError(f"unknown option(s) {sorted(unknown)} for format {format!r}; accepted: {accepted}")
    missing = required - set(options)
    if missing:
        raise ValueError(f"format {format!r} needs option(s) {sorted(missing)}")
    if format == "avro":
        return AvroCodec(**options)
    return JsonCodec(**options)
