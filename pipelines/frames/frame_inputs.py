"""Users' streaming DataFrames, one per stream of the spec, as one union in the adapted layout's columns.

Each input is checked against its stream in the spec (every field there, with a Spark type the spec's type takes;
an error names the stream, the field and the accepted types), given Spark's event-time watermark
(`allowed_lateness_ms` behind its newest timestamp; Spark's watermark is the minimum over the inputs), and cut to
the join's columns: `stream`, `ts` (epoch ms), `koffset` (a hash of the row's values, see `frame_adapter`), then
one column per (stream, field), null in the other streams' rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windjoin.operators.spec import JoinSpec, StreamSpec
from windjoin.pipelines.job.adapter import field_column

EVENT_TIME = "_windjoin_event_time"  # the watermarked column, dropped after the union
_INTS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
ACCEPTED = {  # the spec's field type -> the Spark types it takes
    "int": _INTS,
    "float": (*_INTS, T.FloatType, T.DoubleType),
    "string": (T.StringType,),
    "bool": (T.BooleanType,),
}
SPARK_TYPES = {"int": "bigint", "float": "double", "string": "string", "bool": "boolean"}
TIMESTAMPS = (*_INTS, T.TimestampType)  # epoch milliseconds, or a Spark timestamp


class FrameInputError(ValueError):
    """An input DataFrame does not fit the spec; the message names the stream and what is wrong."""


def union_inputs(spec: JoinSpec, inputs: Mapping[str, DataFrame]) -> DataFrame:
    """The inputs, checked and watermarked, as one streaming DataFrame of the join's columns (module docstring)."""
    given, wanted = set(inputs), set(spec.streams)
    if given != wanted:
        raise FrameInputError(
            f"inputs: one streaming DataFrame per stream of the spec, {sorted(wanted)}; got {sorted(given)}"
            + (f" (missing {sorted(wanted - given)})" if wanted - given else "")
            + (f" (not in the spec: {sorted(given - wanted)})" if given - wanted else "")
        )
    return reduce(DataFrame.union, (_stream_rows(spec, name, inputs[name]) for name in spec.streams))


def _stream_rows(spec: JoinSpec, name: str, frame: DataFrame) -> DataFrame:
    stream = spec.streams[name]
    if not isinstance(frame, DataFrame) or not frame.isStreaming:
        raise FrameInputError(f"inputs[{name!r}]: not a streaming DataFrame (read it with spark.readStream)")
    types = {f.name: f.dataType for f in frame.schema.fields}
    ts = _event_ms(name, stream, types)
    values = {field: _value(name, field, ftype, types) for field, ftype in stream.fields.items()}
    columns = [F.lit(name).alias("stream"), ts.alias("ts")]
    columns.append(F.xxhash64(ts, *values.values()).alias("koffset"))
    for other, s in spec.streams.items():
        for field, ftype in s.fields.items():
            value = values[field] if other == name else F.lit(None).cast(SPARK_TYPES[ftype])
            columns.append(value.alias(field_column(other, field)))
    watermarked = frame.withColumn(EVENT_TIME, F.timestamp_millis(ts)).withWatermark(
        EVENT_TIME, f"{spec.allowed_lateness_ms} milliseconds"
    )
    return watermarked.select(*columns)


def _event_ms(name: str, stream: StreamSpec, types: Mapping[str, T.DataType]) -> Column:
    found = types.get(stream.timestamp)
    if not isinstance(found, TIMESTAMPS):
        raise FrameInputError(
            f"inputs[{name!r}]: the timestamp column {stream.timestamp!r} (streams.{name}.timestamp) is "
            f"{_described(found)}; accepted: epoch milliseconds as an integer type, or a Spark timestamp"
        )
    column = F.col(f"`{stream.timestamp}`")
    return F.unix_millis(column) if isinstance(found, T.TimestampType) else column.cast("bigint")


def _value(name: str, field: str, ftype: str, types: Mapping[str, T.DataType]) -> Column:
    found = types.get(field)
    if not isinstance(found, ACCEPTED[ftype]):
        accepted = ", ".join(t.typeName() for t in ACCEPTED[ftype])
        raise FrameInputError(
            f"inputs[{name!r}]: field {field!r} (streams.{name}.fields.{field}: {ftype}) is {_described(found)}; "
            f"accepted Spark types: {accepted}"
        )
    return F.col(f"`{field}`").cast(SPARK_TYPES[ftype])


def _described(found: T.DataType | None) -> str:
    return "missing" if found is None else f"of type {found.simpleString()}"
