"""Paced load encoded before its schedule starts, so that keeping the schedule costs only the sending.

Beside a saturated Spark on 2 cores, `windjoin generate --pace` fell seconds behind its schedule: drawing, checking
and encoding each event in Python cost more CPU than it got. Here the whole schedule is encoded first (JSON streams
of int fields as whole columns with pyarrow, byte for byte what the per-event encoder writes; any other stream
event by event) and the schedule's time 0 is set after that work, so that the paced loop only hands records over.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windjoin.connectors.formats.stream_encoder import StreamEncoder
from windjoin.connectors.kafka.producer import Record
from windjoin.operators.workloads.b_model import Workload

LEAD_MARGIN = 1.3  # the schedule starts this many times the sampled encoding time after now (plus LEAD_FLOOR_S)
LEAD_FLOOR_S = 0.5
SAMPLE_S = 1.0  # schedule seconds encoded to time the encoding


@dataclass(frozen=True)
class Encoded:
    """One stream's records of one slice: keys (None: no key), values and event times, kept packed in Arrow."""

    keys: pa.Array | None
    values: pa.Array
    timestamps: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Record]:
        keys = self.keys.to_pylist() if self.keys is not None else [None] * len(self)
        return zip(keys, self.values.to_pylist(), self.timestamps.tolist(), strict=True)


def encode_columns(encoder: StreamEncoder, columns: dict[str, np.ndarray]) -> Encoded:
    """The records of one stream's columns (`Workload.column_slices`), as `encoder.encode` makes them."""
    if _columnar(encoder, columns):
        return _json_int_columns(encoder, columns)
    names = list(columns)
    messages = [
        encoder.encode(dict(zip(names, row, strict=True)))
        for row in zip(*(c.tolist() for c in columns.values()), strict=True)
    ]
    keys = None if encoder.stream.key is None else pa.array([m.key for m in messages], pa.binary())
    values = pa.array([m.value for m in messages], pa.binary())
    return Encoded(keys, values, np.array([m.timestamp_ms for m in messages], dtype=np.int64))


def _columnar(encoder: StreamEncoder, columns: dict[str, np.ndarray]) -> bool:
    """JSON whose columns are the stream's own (timestamp, then declared fields), all int64: orjson writes those
    as `{"name":digits,...}`, which pyarrow can build for a whole column."""
    stream = encoder.stream
    expected = [stream.timestamp, *stream.fields]
    return (
        encoder.format == "json"
        and list(columns) == expected
        and all(ftype == "int" for ftype in stream.fields.values())
        and all(c.dtype == np.int64 for c in columns.values())
    )


def _json_int_columns(encoder: StreamEncoder, columns: dict[str, np.ndarray]) -> Encoded:
    parts: list[pa.Array | str] = []
    for i, (name, column) in enumerate(columns.items()):
        parts.append(("{" if i == 0 else ",") + f'"{name}":')
        parts.append(pc.cast(pa.array(column), pa.string()))
    parts.append("}")
    values = pc.binary_join_element_wise(*parts, "").cast(pa.binary())
    key = encoder.stream.key
    keys = None if key is None else pc.cast(pa.array(columns[key]), pa.string()).cast(pa.binary())
    return Encoded(keys, values, columns[encoder.stream.timestamp])


def encode_schedule(workload: Workload, encoders: dict[str, StreamEncoder]) -> list[tuple[float, dict[str, Encoded]]]:
    """Every slice of the workload's schedule: (when it is due, schedule s; each stream's records)."""
    return [
        (end_s, {name: encode_columns(encoders[name], cols) for name, cols in per_stream.items()})
        for end_s, per_stream in workload.column_slices()
    ]


def lead_s(workload: Workload, encoders: dict[str, StreamEncoder]) -> float:
    """How long before its time 0 a schedule like `workload`'s must start encoding: up to `SAMPLE_S` schedule
    seconds after its first slice (which warms up, untimed) are encoded, thrown away (pass a workload of the same
    config) and the time scaled to the whole schedule."""
    slices = workload.column_slices()
    first_end, first = next(slices)
    for name, cols in first.items():
        encode_columns(encoders[name], cols)
    started, done = time.perf_counter(), first_end
    for end_s, per_stream in slices:
        for name, cols in per_stream.items():
            encode_columns(encoders[name], cols)
        done = end_s
        if end_s - first_end >= SAMPLE_S:
            break
    per_schedule_s = (time.perf_counter() - started) / (done - first_end) if done > first_end else 0.0
    return LEAD_MARGIN * per_schedule_s * workload.config.duration_s + LEAD_FLOOR_S
