"""Turning a task's columnar pairs into one plain record per pair, for files and other row-wise sinks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from windjoin.operators.join import Pairs
from windjoin.operators.mjoin import Combinations
from windjoin.operators.unpaired import Lone


def pair_records(pairs: Pairs | Combinations) -> Iterator[dict[str, Any]]:
    """`{"task": name, <stream>: {field: value, ...}, ...}` per pair, in emission order, as Python values; a pair
    of a window of its own (tumbling, hopping) also has `window_start` and `window_end`."""
    sides = {stream: {name: col.tolist() for name, col in columns.items()} for stream, columns in pairs.sides.items()}
    windows = _windows(pairs.windows)
    for i in range(len(pairs)):
        record: dict[str, Any] = {"task": pairs.task, **(windows[i] if windows else {})}
        for stream, columns in sides.items():
            record[stream] = {name: values[i] for name, values in columns.items()}
        yield record


def lone_records(lone: Lone) -> Iterator[dict[str, Any]]:
    """`{"task": name, <stream>: {field: value, ...}, <other stream>: None}` per row, in the task's join order."""
    columns = {name: col.tolist() for name, col in lone.columns.items()}
    windows = _windows(lone.windows)
    for i in range(len(lone)):
        record: dict[str, Any] = {"task": lone.task, **(windows[i] if windows else {})}
        for stream in lone.join:
            record[stream] = {name: values[i] for name, values in columns.items()} if stream == lone.stream else None
        yield record


def _windows(windows: tuple[np.ndarray, np.ndarray] | None) -> list[dict[str, int]] | None:
    """Each row's `{"window_start": ms, "window_end": ms}`; None for rows of no window of their own."""
    if windows is None:
        return None
    return [{"window_start": a, "window_end": b} for a, b in zip(windows[0].tolist(), windows[1].tolist(), strict=True)]
