"""The join_stream benchmark runs end to end (--quick, tiny) and records both systems' figures (a smoke run)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_frames_benchmark_quick_run(tmp_path):
    out = tmp_path / "frames.json"
    result, _ = run_benchmark("frames", out, "--quick", "--events", "40000", timeout=600)
    assert result["machine"]["cpu_model"] and out.with_suffix(".png").exists()
    for task in ("equi", "band"):
        runs = result["tasks"][task]
        assert runs["result_rows_equal"] and runs["windjoin"]["best"]["result_rows"] > 0, task
        assert runs["windjoin"]["best"]["dead_letters"] == 0
        for config in ("hdfs_v2", "rocksdb_v4"):  # both of Spark's configurations, each shown to be in effect
            assert runs[config]["best"]["rows_per_s"] > 0 and runs[config]["best"]["evidence"]["in_effect"], config
        assert runs["ratio"] > 0
    assert set(result["targets"]) == {"equi_at_least_2x_builtin", "band_at_least_2x_builtin"}
