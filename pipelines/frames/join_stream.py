"""`join_stream`: the spec's join tasks over a user's own streaming DataFrames, results as a streaming DataFrame.

The second entry to the job's slots (ARCHITECTURE.md, "The join on users' DataFrames"): the inputs are unioned
(`frame_inputs`), routed to slots and packed in pieces on the executors (`frame_adapter`), and joined by the job's
own processor over Spark's RocksDB state (`frame_processor`), whose result rows the user writes with any
`writeStream` sink. What `windjoin run` adds beyond it: reading Kafka with per-partition event time, the
controller's moves, spreads, shedding and spills, and windjoin's own sinks and queries.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from pyspark.sql import DataFrame

from windjoin.operators.spec import JoinSpec
from windjoin.pipelines.frames.frame_adapter import FrameAdapter
from windjoin.pipelines.frames.frame_inputs import union_inputs
from windjoin.pipelines.frames.frame_processor import FrameJoinProcessor
from windjoin.pipelines.frames.result_rows import flat_ddl, nested
from windjoin.pipelines.job.join_job import STATE_CONF, slot_labels
from windjoin.pipelines.job.slot_pieces import PIECE_DDL


def join_stream(spec: JoinSpec, inputs: Mapping[str, DataFrame]) -> DataFrame:
    """The results of `spec`'s tasks over `inputs` (`{stream: streaming DataFrame}`, each with its stream's
    timestamp and fields), as a streaming DataFrame (`result_rows` gives its schema). Sets the session's state
    store to RocksDB (transformWithState needs it); write the result with any sink and a checkpoint location."""
    union = union_inputs(spec, inputs)
    spark = union.sparkSession
    for key, value in STATE_CONF.items():
        spark.conf.set(key, value)
    labels = slot_labels(spark, spec.slots)
    processor = FrameJoinProcessor(spec, labels, f"join_stream:{uuid.uuid4().hex}")
    flat = (
        union.mapInArrow(FrameAdapter(spec, labels), PIECE_DDL)
        .groupBy("slot")
        .transformWithStateInPandas(
            statefulProcessor=processor,
            outputStructType=flat_ddl(spec),
            outputMode="Append",
            timeMode="EventTime",
        )
    )
    return nested(spec, flat)
