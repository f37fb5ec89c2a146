"""The local brokers benchmark runs end to end (--quick) and records both brokers' start-up and memory."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark
from tests.services_fixtures import fetch_kafka_jars


@pytest.mark.slow
def test_local_brokers_benchmark_quick_run(tmp_path):
    fetch_kafka_jars()
    result, _ = run_benchmark("local_brokers", tmp_path / "local_brokers.json", "--quick", timeout=300)
    assert set(result["brokers"]) == {"tansu", "kafka"}
    for figures in result["brokers"].values():
        assert figures["first_start_s"] > 0 and len(figures["restart_s"]) == 1
        assert figures["loaded_rss_mb"] > 0 and figures["idle_rss_mb"] > 0
