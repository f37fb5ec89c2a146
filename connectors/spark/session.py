"""Build a local SparkSession with the settings windjoin's jobs and tests rely on.

Local mode on a small machine: `local[2]`, no web UI, few shuffle partitions, loopback networking, Python
workers on the running interpreter, and a large driver thread stack (``query.stop()`` can otherwise raise a
StackOverflowError in the stream thread). Spark's own Kafka connector is on the classpath when the setup fetched
it (connectors.spark.connector_jars).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from windjoin.connectors.spark.connector_jars import spark_kafka_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": "-Xss64m",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
}


def build_local_spark(
    app_name: str = "windjoin",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a (possibly existing) SparkSession for `master` with windjoin's local defaults.

    `conf` entries override the defaults. The process environment is prepared first: PYSPARK_PYTHON and
    PYSPARK_DRIVER_PYTHON point at this interpreter (unless already set) and SPARK_LOCAL_IP defaults to
    127.0.0.1, because these must be in place before the JVM starts.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master(master)
    kafka_jars = spark_kafka_jars()
    jars = {"spark.jars": ",".join(kafka_jars)} if kafka_jars else {}
    for key, value in {**DEFAULT_CONF, **jars, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
