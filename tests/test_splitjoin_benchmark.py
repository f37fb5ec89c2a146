"""The SplitJoin benchmark runs end to end (--quick): kernel and Spark figures, and its exact-count check holds."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_splitjoin_benchmark_quick_run(tmp_path):
    out = tmp_path / "splitjoin.json"
    result, _ = run_benchmark("splitjoin", out, "--quick", timeout=300)
    assert result["machine"]["cpu_model"] and result["date"] and len(result["load_avg_start"]) == 3
    assert [r["window"] for r in result["kernel"]] == ["2^12", "2^14", "5 min"]
    for row in result["kernel"]:
        assert row["prefix_pairs"] > 0  # indexed and nested loop agreed on a non-empty prefix
        assert row["indexed"]["tuples_per_s"] > row["nested_loop"]["tuples_per_s"] > 0
        assert 0 < row["indexed"]["chunk_latency_p50_ms"] <= row["indexed"]["chunk_latency_p99_ms"]
    assert result["kernel"][-1]["tuples_per_stream"] == 5 * 60 * 100  # 100 tuples/s per stream in --quick
    e2e = result["e2e"]
    assert e2e["throughput"][0]["rows_per_s"] > 0
    [paced] = e2e["paced"]
    assert paced["window"] == {"kind": "time", "size_ms": 300_000} and paced["kept_up"]
    assert paced["delay_emitted"]["p50_ms"] is not None
    check = e2e["check"]
    assert check["ok"] and check["exact_pairs"] == check["parquet_pairs"] > 0
    assert out.with_suffix(".png").stat().st_size > 0
