"""Spark's own Kafka connector (spark-sql-kafka-0-10) for local sessions: the jars scripts/fetch_jars.sh fetches.

Spark ships without it; a cluster adds it with `--packages`. Locally the setup fetches the pinned set
(scripts/maven/spark-kafka.pom.xml) into .tools/jars/spark-kafka, or WINDJOIN_SPARK_KAFKA_JARS names a folder of
them; a session built by `build_local_spark` then reads and writes `format("kafka")` like a cluster's. Without
the folder, sessions are built without it and `format("kafka")` fails as on a bare Spark.
"""

from __future__ import annotations

import os
from pathlib import Path

JARS_ENV = "WINDJOIN_SPARK_KAFKA_JARS"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".tools" / "jars" / "spark-kafka"


def spark_kafka_jars() -> list[str]:
    """The connector's jars (comma-joinable for `spark.jars`), or [] when they were not fetched."""
    folder = Path(os.environ.get(JARS_ENV) or DEFAULT_DIR)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    return jars if any("spark-sql-kafka" in Path(j).name for j in jars) else []
