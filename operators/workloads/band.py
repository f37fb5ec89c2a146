"""Synthetic event streams: the SplitJoin/handshake band-join benchmark workload (shared/papers/README.md)."""

from __future__ import annotations

import numpy as np

BAND_SPEC = {
    "window": {"kind": "count", "size": 4096},
    "streams": {
        "R": {"timestamp": "ts", "fields": {"x": "int", "y": "float", "z": "string"}},
        "S": {"timestamp": "ts", "fields": {"a": "int", "b": "float", "c": "float", "d": "bool"}},
    },
    "tasks": [
        {
            "name": "band",
            "join": ["R", "S"],
            "on": [
                {"op": "band", "left": "R.x", "right": "S.a", "width": 10},
                {"op": "band", "left": "R.y", "right": "S.b", "width": 10},
            ],
        }
    ],
}


def band_columns(stream: str, n: int, rng: np.random.Generator, start_ts: int = 0) -> dict[str, np.ndarray]:
    """n tuples of R (x int, y float, z 20-char string) or S (a int, b float, c double, d bool), values 1..10^4."""
    ts = start_ts + np.arange(n, dtype=np.int64)
    if stream == "R":
        letters = rng.integers(97, 123, size=(n, 20), dtype=np.uint8)
        z = np.array(letters.view("S20").ravel().astype(str), dtype=object)
        return {"ts": ts, "x": rng.integers(1, 10_001, n), "y": rng.uniform(1, 10_000, n), "z": z}
    return {
        "ts": ts,
        "a": rng.integers(1, 10_001, n),
        "b": rng.uniform(1, 10_000, n),
        "c": rng.uniform(1, 10_000, n),
        "d": rng.random(n) < 0.5,
    }


def band_events(n: int, seed: int = 0) -> list[dict]:
    """n events alternating between R and S in arrival order, one millisecond apart."""
    rng = np.random.default_rng(seed)
    half = (n + 1) // 2
    columns = {"R": band_columns("R", half, rng), "S": band_columns("S", half, rng)}
    rows = {stream: {name: col.tolist() for name, col in cols.items()} for stream, cols in columns.items()}
    events = []
    for i in range(n):
        stream = "R" if i % 2 == 0 else "S"
        event = {"stream": stream, **{name: values[i // 2] for name, values in rows[stream].items()}}
        event["ts"] = i
        events.append(event)
    return events
