"""JSON records: one UTF-8 JSON object per Kafka message, via orjson.

Decoding yields a plain ``dict``. Notes on what orjson does, and so what this codec does:

* Integers outside 64 bits decode as floats (lossy); encoding one is an :class:`EncodeError`.
* ``NaN``/``Infinity`` are not JSON: decoding them is ``not_json``, and encoding a non-finite float is an
  :class:`EncodeError` (orjson alone would silently write ``null``).
* A duplicated key keeps its last value; a byte-order mark is ``not_json``.

Decoding keeps no state between messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from windjoin.connectors.formats.codec_errors import (
    DEFAULT_MAX_MESSAGE_BYTES,
    NOT_AN_OBJECT,
    NOT_JSON,
    NOT_UTF8,
    DecodeError,
    EncodeError,
    check_decodable,
    check_encoded_size,
    check_max_message_bytes,
)

_JSON_KIND = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


_SCALARS = (str, int, bool, type(None))


def _has_non_finite(value: Any) -> bool:
    """Whether a NaN or infinite float occurs anywhere inside ``value`` (fast: builds no paths)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is float:
            if not math.isfinite(item):
                return True
        elif kind is dict:
            pending.extend(item.values())
        elif kind is list or kind is tuple:
            pending.extend(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return False


def _non_finite_path(value: Any, path: str = "") -> str | None:
    """The path of the first NaN/infinite float inside ``value``, for the error message."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "<record>")
    children: Any = ()
    if isinstance(value, Mapping):
        children = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        children = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    for child_path, item in children:
        found = _non_finite_path(item, child_path)
        if found is not None:
            return found
    return None


class JsonCodec:
    """Encode a record to a JSON object's UTF-8 bytes; decode such bytes back to a ``dict``."""

    format = "json"

    def __init__(self, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_message_bytes = check_max_message_bytes(max_message_bytes)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """The JSON bytes of ``record``; EncodeError if it is not representable in JSON exactly."""
        if not isinstance(record, Mapping):
            raise EncodeError(f"a record must be a mapping, not {type(record).__name__}")
        if _has_non_finite(record):
            raise EncodeError(f"{_non_finite_path(record)}: NaN and infinite floats have no JSON form")
        try:
            message = orjson.dumps(record if isinstance(record, dict) else dict(record))
        except orjson.JSONEncodeError as exc:
            raise EncodeError(f"record is not JSON-serialisable: {exc}") from exc
        return check_encoded_size(message, self.max_message_bytes)

    def decode(self, data: bytes | bytearray | memoryview | None) -> dict[str, Any]:
        """The object in a JSON message; DecodeError with a reason if it is not one."""
        check_decodable(data, self.max_message_bytes)
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            try:
                bytes(data).decode("utf-8")
            except UnicodeDecodeError as utf8_error:
                raise DecodeError(NOT_UTF8, f"invalid UTF-8 at byte {utf8_error.start}: {utf8_error.reason}") from exc
            raise DecodeError(NOT_JSON, str(exc)) from exc
        if type(value) is not dict:
            kind = "null" if value is None else _JSON_KIND.get(type(value), type(value).__name__)
            raise DecodeError(NOT_AN_OBJECT, f"the top-level JSON value is {kind}, not an object")
        return value
