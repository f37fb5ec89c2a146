"""Shared fixtures: real services (broker, Redis) and Spark, started once per session when a test asks; the slow
first-use installers (the image, PyFlink) started as soon as the session is known to need them."""

from __future__ import annotations

import os

import pytest

from tests.first_use import BUILD_IMAGE, SETUP_FLINK, join_background, podman_installable, start_in_background

pytest_plugins = ["tests.services_fixtures", "tests.spark_fixtures", "tests.s3_server"]
# The helpers test modules share (tests/support/) assert as the tests do: their failures explained alike.
pytest.register_assert_rewrite("tests.support")
# The suite's JVMs (Spark's driver, cluster and executors, Flink) live seconds to minutes: compiled by C1 alone they
# spend ~25% less CPU than with C2 on top (two `windjoin run` starts: 56-58 CPU-s, 41-46 with it), and the suite is
# CPU-bound on 2 cores. Every JVM the tests start inherits it; the product's JVMs and benchmark runs outside the
# suite keep the default.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_collection_finish(session: pytest.Session) -> None:
    """From empty storage the image takes ~3 min of downloads and unpacking, PyFlink ~30 s: started now, the
    tests collected before the ones that need them overlap them."""
    if session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    if "windjoin_image" in wanted and podman_installable():
        start_in_background(BUILD_IMAGE)
    if "pyflink" in wanted:
        start_in_background(SETUP_FLINK)


def pytest_sessionfinish(session: pytest.Session) -> None:
    join_background()
