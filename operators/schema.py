"""Checking decoded records against a stream's declared fields and turning accepted rows into columns."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from windjoin.operators.spec import StreamSpec

# Integers must round-trip through float64 exactly: the ordered indexes and JSON tools rely on it.
MAX_SAFE_INT = 2**53 - 1

DTYPES = {"int": np.int64, "float": np.float64, "bool": np.bool_, "string": object}

# Reasons a record is refused; the dead-letter output carries them verbatim.
MISSING_TIMESTAMP = "missing_timestamp"
BAD_TIMESTAMP = "bad_timestamp"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
OUT_OF_RANGE = "out_of_range"
LATE = "late"
FUTURE_TIMESTAMP = "future_timestamp"
RECORD_REASONS = (MISSING_TIMESTAMP, BAD_TIMESTAMP, MISSING_FIELD, WRONG_TYPE, OUT_OF_RANGE, LATE, FUTURE_TIMESTAMP)


class RecordError(ValueError):
    """A record that cannot join: `reason` is machine-readable, the message says what was wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def parse_timestamp(value: Any) -> int:
    """Event time in epoch milliseconds, from an int or an ISO-8601 string (naive means UTC)."""
    if isinstance(value, bool):
        raise RecordError(BAD_TIMESTAMP, f"timestamp is a bool ({value!r}); expected epoch milliseconds or ISO-8601")
    if isinstance(value, int):
        if not 0 <= value <= MAX_SAFE_INT:
            raise RecordError(BAD_TIMESTAMP, f"timestamp {value} is outside 0..{MAX_SAFE_INT} epoch milliseconds")
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise RecordError(BAD_TIMESTAMP, f"timestamp {value!r} is not ISO-8601 nor epoch milliseconds") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parse_timestamp(round(parsed.timestamp() * 1000))
    raise RecordError(BAD_TIMESTAMP, f"timestamp {value!r} ({type(value).__name__}) is not epoch ms nor ISO-8601")


def _check_value(name: str, ftype: str, value: Any) -> Any:
    if value is None:
        raise RecordError(MISSING_FIELD, f"field {name!r} is null")
    if ftype == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(WRONG_TYPE, f"field {name!r} should be int, got {type(value).__name__} {value!r}")
        if abs(value) > MAX_SAFE_INT:
            raise RecordError(OUT_OF_RANGE, f"field {name!r} = {value} is outside ±{MAX_SAFE_INT}")
        return value
    if ftype == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(WRONG_TYPE, f"field {name!r} should be float, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or abs(value) > 1.7976931348623157e308:
            raise RecordError(OUT_OF_RANGE, f"field {name!r} = {value!r} is not a finite float")
        return float(value)
    if ftype == "bool":
        if not isinstance(value, bool):
            raise RecordError(WRONG_TYPE, f"field {name!r} should be bool, got {type(value).__name__} {value!r}")
        return value
    if not isinstance(value, str):
        raise RecordError(WRONG_TYPE, f"field {name!r} should be string, got {type(value).__name__} {value!r}")
    return value


class StreamSchema:
    """A stream's columns in a fixed order: the timestamp first, then the declared fields."""

    def __init__(self, spec: StreamSpec) -> None:
        self.timestamp = spec.timestamp
        self.fields = dict(spec.fields)
        self.columns = (spec.timestamp, *spec.fields)

    def check(self, record: Mapping[str, Any]) -> tuple[Any, ...]:
        """The record's values in column order, or RecordError; fields not declared are dropped (pre-projection)."""
        if self.timestamp not in record:
            raise RecordError(MISSING_TIMESTAMP, f"no timestamp field {self.timestamp!r}")
        row = [parse_timestamp(record[self.timestamp])]
        for name, ftype in self.fields.items():
            if name not in record:
                raise RecordError(MISSING_FIELD, f"no field {name!r}")
            row.append(_check_value(name, ftype, record[name]))
        return tuple(row)

    def to_columns(self, rows: Sequence[tuple[Any, ...]]) -> dict[str, np.ndarray]:
        """Checked rows as typed numpy columns."""
        types = ("int", *self.fields.values())
        if not rows:
            return {name: np.empty(0, dtype=DTYPES[t]) for name, t in zip(self.columns, types, strict=True)}
        by_column = list(zip(*rows, strict=True))
        return {
            name: np.array(values, dtype=DTYPES[t]) if t != "string" else _object_array(values)
            for name, t, values in zip(self.columns, types, by_column, strict=True)
        }


def _object_array(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
