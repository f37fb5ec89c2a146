"""The query benchmark runs end to end (--quick) and writes one-time latencies and fan-out rounds (a smoke run)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_queries_benchmark_quick_run(tmp_path):
    out = tmp_path / "queries.json"
    result, _ = run_benchmark("queries", out, "--quick", timeout=420)
    across = result["one_time"]["span_60s_across_tiers"]
    assert across["crossing_tier_boundary"] == across["n"] > 0
    assert across["p99_ms"] is not None and across["rows"] > 0
    for kind in ("whole_stream", "selective"):
        first = result["fanout"][kind]["rounds"][0]
        assert first["subscribers"] == 1 and first["rows_expected"] > 0
        assert 0 < first["rows_received_max"] <= first["rows_expected"]
    assert result["fanout_at_issue_30_rate"]["rounds"][0]["rows_expected"] > 0  # (in --quick: at the quick rate)
    assert set(result["targets"]) == {
        "span_1s_p50_p99_at_most_72_190_ms",
        "32_whole_stream_subscribers_at_issue_30_rate",
    }
    floor = result["fanout_floor"]["rounds"][0]  # a server with no work per row, the same clients
    assert floor["subscribers"] == 1 and floor["kept_up"], floor
