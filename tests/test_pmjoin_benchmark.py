"""benchmarks/pmjoin.py runs end to end with --quick and writes its results and plot (a smoke run)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


def test_pmjoin_benchmark_quick_run(tmp_path):
    out = tmp_path / "pmjoin.json"
    result, _ = run_benchmark("pmjoin", out, "--quick", timeout=300)
    assert out.with_suffix(".png").stat().st_size > 0
    assert result["example1"]["best_centralized"] == pytest.approx(100.1)
    assert result["example1"]["distributed_unpartitioned"] == pytest.approx(54.0316)
    assert result["example1"]["pmjoin_substreams_abc"] == pytest.approx(0.0696)
    assert result["heuristic_vs_optimal"]["min_ratio"] >= 1 - 1e-9
    for rows in list(result["fig5"].values()) + list(result["fig6"].values()):
        assert all(o <= h * (1 + 1e-9) for h, o in zip(rows["heuristic"], rows["optimal"], strict=True))
    for rows in result["fig8"].values():
        for method in ("hash", "range", "rate"):
            assert rows[method][0] == pytest.approx(rows["unpartitioned"])  # one partition = no partitioning
            assert max(rows[method]) <= rows["unpartitioned"] * (1 + 1e-9)
    assert result["machine"]["cpu_model"]
