"""Record checking: each kind of bad record is refused with its own reason, good ones become typed columns."""

from __future__ import annotations

import numpy as np
import pytest

from windjoin.operators import schema
from windjoin.operators.schema import RecordError, StreamSchema
from windjoin.operators.spec import StreamSpec

STREAM = StreamSchema(StreamSpec(timestamp="ts", fields={"k": "int", "y": "float", "z": "string", "f": "bool"}))
GOOD = {"ts": 1700000000000, "k": 1, "y": 2.5, "z": "a", "f": True}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"ts": None}, schema.BAD_TIMESTAMP),
        ({"ts": "yesterday"}, schema.BAD_TIMESTAMP),
        ({"ts": -1}, schema.BAD_TIMESTAMP),
        ({"ts": True}, schema.BAD_TIMESTAMP),
        ({"k": "1"}, schema.WRONG_TYPE),
        ({"k": 1.0}, schema.WRONG_TYPE),
        ({"k": True}, schema.WRONG_TYPE),
        ({"k": 2**60}, schema.OUT_OF_RANGE),
        ({"y": "2.5"}, schema.WRONG_TYPE),
        ({"y": float("nan")}, schema.OUT_OF_RANGE),
        ({"z": 3}, schema.WRONG_TYPE),
        ({"f": 1}, schema.WRONG_TYPE),
        ({"k": None}, schema.MISSING_FIELD),
    ],
)
def test_bad_values_have_reasons(change, reason):
    with pytest.raises(RecordError) as err:
        STREAM.check({**GOOD, **change})
    assert err.value.reason == reason


def test_missing_fields():
    with pytest.raises(RecordError) as err:
        STREAM.check({k: v for k, v in GOOD.items() if k != "ts"})
    assert err.value.reason == schema.MISSING_TIMESTAMP
    with pytest.raises(RecordError) as err:
        STREAM.check({k: v for k, v in GOOD.items() if k != "z"})
    assert err.value.reason == schema.MISSING_FIELD


def test_iso_timestamps_and_projection():
    row = STREAM.check({**GOOD, "ts": "2023-11-14T22:13:20Z", "extra": [1, 2]})
    assert row[0] == 1700000000000
    assert STREAM.check({**GOOD, "ts": "2023-11-14T22:13:20"})[0] == 1700000000000  # naive is UTC
    assert STREAM.check({**GOOD, "y": 3})[2] == 3.0  # ints are accepted as floats


def test_columns_are_typed():
    cols = STREAM.to_columns([STREAM.check(GOOD), STREAM.check({**GOOD, "k": 2, "z": "b"})])
    assert cols["ts"].dtype == np.int64 and cols["k"].tolist() == [1, 2]
    assert cols["y"].dtype == np.float64 and cols["f"].dtype == np.bool_
    assert cols["z"].tolist() == ["a", "b"]
    assert STREAM.to_columns([])["k"].dtype == np.int64
