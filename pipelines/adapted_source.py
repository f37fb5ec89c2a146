"""The join job's input: the Kafka source with the input adapter applied inside the reader.

S2J puts the adapter where records enter. Running it in the reader's Python worker, rather than as a
`mapInArrow` stage after the source, spares every raw record a trip from that worker to the JVM and into
another Python worker: the stage reads, decodes, checks and routes in one pass and ships only join rows.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from windjoin.connectors.kafka_source import KafkaDataSource, KafkaSourceOptions, KafkaStreamReader
from windjoin.pipelines.adapter import Adapter

ADAPTED_SOURCE_NAME = "windjoin_adapted_kafka"
ADAPTER_OPTION = "windjoin.adapter"  # the Adapter, pickled and base64-encoded (options are strings)


def encode_adapter(adapter: Adapter) -> str:
    return base64.b64encode(pickle.dumps(adapter)).decode("ascii")


def decode_adapter(options: Any) -> Adapter:
    raw = options.get(ADAPTER_OPTION)
    if not raw:
        raise ValueError(f"option {ADAPTER_OPTION!r} is required: use read_adapted() to build this source")
    return pickle.loads(base64.b64decode(raw))  # noqa: S301 - written by read_adapted in this job's driver


class AdaptedStreamReader(KafkaStreamReader):
    """The Kafka stream reader, yielding adapted join rows instead of raw records."""

    def __init__(self, options: KafkaSourceOptions, adapter: Adapter) -> None:
        super().__init__(options)
        self.adapter = adapter

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.adapter(super().read(partition))


class AdaptedKafkaSource(KafkaDataSource):
    """``format("windjoin_adapted_kafka")``: the Kafka source options plus ``windjoin.adapter``."""

    @classmethod
    def name(cls) -> str:
        return ADAPTED_SOURCE_NAME

    def schema(self) -> Any:
        return from_arrow_schema(decode_adapter(self.options).schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return AdaptedStreamReader(KafkaSourceOptions.from_options(self.options), decode_adapter(self.options))


def read_adapted(spark: SparkSession, adapter: Adapter, options: dict[str, str]) -> DataFrame:
    """A streaming DataFrame of adapted rows (`adapter.schema`) from the topics of `adapter.spec`."""
    spark.dataSource.register(AdaptedKafkaSource)
    topics = ",".join(s.topic for s in adapter.spec.streams.values() if s.topic)
    reader = spark.readStream.format(ADAPTED_SOURCE_NAME).option("topics", topics)
    for key, value in {**options, ADAPTER_OPTION: encode_adapter(adapter)}.items():
        reader = reader.option(key, value)
    return reader.load()
