"""pytest plugin: one local SparkSession for the whole test session, stopped at its end.

Load it with ``pytest_plugins = ["tests.spark_fixtures"]`` (in tests/conftest.py or a test module).
Starting the JVM costs ~10 s on 2 cores, so every Spark test shares this session; tests must not stop it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from windjoin.connectors.spark.session import build_local_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(redis_login: Path) -> Iterator[SparkSession]:
    """A `local[2]` SparkSession (no UI, 2 shuffle partitions, loopback), stopped after the last test. Started
    after `redis_login` names the embedded Redis' password file: its Python workers inherit the JVM's environment
    as it was at launch, and the sinks they build log in from it."""
    session = build_local_spark(app_name="windjoin-tests")
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
