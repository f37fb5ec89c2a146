"""What the sink tests share: a two-task spec and a large random result table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from windjoin.operators.result_table import table_from_columns
from windjoin.operators.spec import parse_spec

SPEC = parse_spec(
    {
        "window": {"kind": "time", "size_ms": 1000},
        "streams": {
            "R": {"timestamp": "ts", "fields": {"k": "int", "x": "float", "z": "string"}},
            "S": {"timestamp": "t", "fields": {"k": "int", "d": "bool"}},
        },
        "tasks": [{"name": "a", "join": ["R", "S"]}, {"name": "b", "join": ["S", "R"]}],
    }
)


def large_table(n: int, seed: int = 1) -> tuple[dict, pa.Table]:
    """`n` random pairs of task "a" for batch 0: the columns they were built from, and the table."""
    rng = np.random.default_rng(seed)
    sides = {
        "R": {
            "ts": rng.integers(0, 10**12, n),
            "k": rng.integers(0, 100, n),
            "x": rng.random(n),
            "z": ["abcdefgh"] * n,
        },
        "S": {"t": rng.integers(0, 10**12, n), "k": rng.integers(0, 100, n), "d": rng.random(n) < 0.5},
    }
    return sides, table_from_columns(SPEC, "a", sides, 0, 1)
