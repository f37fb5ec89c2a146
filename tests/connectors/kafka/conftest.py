"""The Kafka-facing tests here run on both brokers: Tansu (the suite's default) and Apache Kafka."""

from __future__ import annotations

import os

import pytest

from tests.services_fixtures import KAFKA_ENV
from windjoin.connectors.local import services


@pytest.fixture(scope="session", params=services.BROKERS)
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """Each test taking a broker, once on each (an external WINDJOIN_KAFKA_BOOTSTRAP alone when it is set)."""
    external = os.environ.get(KAFKA_ENV)
    if external:
        if request.param != services.TANSU:
            pytest.skip(f"{KAFKA_ENV} names the one broker to test on")
        return external
    return request.getfixturevalue(
        "apache_kafka_bootstrap" if request.param == services.APACHE_KAFKA else "tansu_bootstrap"
    )
