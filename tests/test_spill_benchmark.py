"""benchmarks.spill runs end to end on a tiny workload: results file, both plots, totals equal across runs."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_spill_benchmark_tiny_run(tmp_path):
    out = tmp_path / "spill.json"
    args = ["--partitions", "6", "--seconds", "24", "--rate", "150", "--window", "6", "--chunk", "2"]
    result, _ = run_benchmark("spill", out, *args, timeout=600)
    for fig in ("fig11", "fig21"):
        assert result[fig]["exact"]  # normal run + clean-up equals the in-memory run's results in every run
        assert len(result[fig]["runs"]) == 3
        assert (tmp_path / f"spill_{fig}.png").stat().st_size > 0
    assert result["machine"]["cores"]
