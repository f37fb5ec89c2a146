"""The query benchmark runs end to end (--quick) and writes one-time latencies and fan-out rounds (a smoke run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_queries_benchmark_quick_run(tmp_path):
    out = tmp_path / "queries.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.queries", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    across = result["one_time"]["span_60s_across_tiers"]
    assert across["crossing_tier_boundary"] == across["n"] > 0
    assert across["p99_ms"] is not None and across["rows"] > 0
    for kind in ("whole_stream", "selective"):
        first = result["fanout"][kind]["rounds"][0]
        assert first["subscribers"] == 1 and first["rows_expected"] > 0
        assert 0 < first["rows_received_max"] <= first["rows_expected"]
