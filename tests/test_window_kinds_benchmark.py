"""The window kinds benchmark runs end to end (--quick, tiny) and records every variant's figures (a smoke run)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_window_kinds_benchmark_quick_run(tmp_path):
    out = tmp_path / "window_kinds.json"
    tiny = ["--events", "60000", "--density", "6000", "--lateness-ms", "500", "--max-offsets", "10000"]
    tiny += ["--state-events", "6000"]  # warm-up (2.5 s of the density) and three batches fit the prefill
    result, _ = run_benchmark("window_kinds", out, "--quick", *tiny, timeout=600)
    assert result["machine"]["cpu_model"] and out.with_suffix(".png").exists()
    for variant in ("sliding", "hopping", "asof"):
        assert result["throughput"][variant]["rows_per_s"] > 0, variant
    state = result["asof_state"]
    assert state["1x"]["drained"] and state["4x"]["drained"] and state["1x"]["state_bytes"] > 0
    assert state["4x"]["events"] >= 3 * state["1x"]["events"]
