"""Result tables of the connector tests: Hypothesis strategies for (R, S) pairs, the result table of a task's
batch (the Redis and Parquet sinks' input), a pair's result time, and canonical bytes to compare values exactly."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from hypothesis import strategies as st

from tests.connectors.sink_cases import SPEC
from windjoin.operators.result_table import table_from_records

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12) | st.sampled_from(
    ['"', "\\", "\n\r\t\b\f", "\x00\x01\x1f\x7f", "é✓😀", "a,b", "]}", ""]
)
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 3.0, 1e16, 2.0**53, 5e-324])
ints = st.integers(-(2**53) + 1, 2**53 - 1)


def pair(ts_r: st.SearchStrategy[int], ts_s: st.SearchStrategy[int]) -> st.SearchStrategy[dict[str, Any]]:
    r = st.fixed_dictionaries({"ts": ts_r, "k": ints, "x": floats, "z": texts})
    s = st.fixed_dictionaries({"t": ts_s, "k": ints, "d": st.booleans()})
    return st.fixed_dictionaries({"R": r, "S": s})


def make_table(task: str, batch_id: int, pairs: list[dict[str, Any]], emitted_at: int = 7) -> pa.Table:
    return table_from_records(SPEC, task, [{"task": task, **p} for p in pairs], batch_id, emitted_at)


def result_time(p: dict[str, Any]) -> int:
    return max(p["R"]["ts"], p["S"]["t"])


def canonical(value: Any) -> bytes:
    """Bytes that tell 3 from 3.0 and 0.0 from -0.0 (Python's == does not)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
