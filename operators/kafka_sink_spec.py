"""The spec's `sinks.kafka` section: which topic the results go to and in which format.

Pure (pydantic only): `operators.spec` registers it (`operators.sink_configs`) so that every spec load accepts
`sinks.kafka`; `pipelines.job.builtin_sinks` builds the sink (`connectors.kafka.results_sink`). The producer's
security comes from the spec's `kafka:` section, Avro schemas go through the spec's `schema_registry:`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

RESULT_FORMATS = ("json", "avro")
_TOPIC = r"^[A-Za-z0-9._-]{1,249}$"  # Kafka's legal topic names
_BOOTSTRAP = r"^[^\s,/@]+:[0-9]{1,5}(,[^\s,/@]+:[0-9]{1,5})*$"  # host:port[,host:port...], no credentials


class KafkaSinkSpec(BaseModel):
    """`sinks.kafka: {topic, format}`: one record per result row (see `connectors.kafka.results_sink`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: Annotated[str, Field(pattern=_TOPIC)]
    format: Literal["json", "avro"] = "json"
    # The cluster the results go to; null: the job's own broker (`windjoin run --bootstrap`).
    bootstrap: Annotated[str, Field(pattern=_BOOTSTRAP)] | None = None
    # Records a transaction may leave in the producer's queue at once (librdkafka's queue.buffering.max.messages).
    queue_records: Annotated[int, Field(strict=True, ge=1_000, le=10_000_000)] = 1_000_000
    timeout_s: Annotated[float, Field(strict=True, gt=0, le=600, allow_inf_nan=False)] = 60.0  # each transaction
