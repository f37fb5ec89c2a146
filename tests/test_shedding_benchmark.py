"""The shedding benchmark runs end to end (--quick, tiny, calibration skipped) and writes both runs' figures."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_shedding_benchmark_quick_run(tmp_path):
    out = tmp_path / "shedding.json"
    tiny = {
        "--capacity": "6000",  # X given: no calibration; R = 1,800/s, burst 5,400/s (tau 0.9, SR 0.75)
        "--pre": "8",
        "--burst": "10",
        "--post": "10",
        "--warmup-s": "2",
        "--window-s": "1",
        "--keys": "1000",
        "--max-offsets": "10000",
        "--drain-s": "60",
    }
    args = [arg for pair in tiny.items() for arg in pair]
    result, printed = run_benchmark("shedding", out, "--quick", *args, timeout=600)
    shed, base = result["shedding_run"], result["baseline_run"]
    assert shed["kept_up"] and base["kept_up"]
    assert shed["decisions_follow_formula"] and base["decisions_follow_formula"]
    assert max(e["shed_ratio"] for e in shed["epochs"]) > 0  # the burst was seen
    assert sum(sum(b["shed"].values()) for b in shed["batches"]) > 0
    assert shed["shed_after_ratio_back_to_zero"] == 0
    assert not any(b["shed"] for b in base["batches"])  # the baseline follows no decision
    for fit in shed["shed_fit"].values():
        assert fit["z"] is None or abs(fit["z"]) < 5
    assert out.with_suffix(".png").stat().st_size > 0
    assert "p99 delay in the burst" in printed
