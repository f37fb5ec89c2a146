"""The README's run command: `windjoin demo` brings everything up, joins generated load, says where results are."""

from __future__ import annotations

import re
import subprocess
import sys

import pyarrow.dataset as ds
import pytest

from windjoin.connectors.local import services


@pytest.mark.slow
def test_streaming_demo_end_to_end(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "windjoin.pipelines",
        "demo",
        "--duration",
        "6",
        "--rate",
        "300",
        "--keys",
        "50",
        "--out-dir",
        str(tmp_path),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
        assert proc.returncode == 0, proc.stderr[-3000:]
        query = re.search(r"query: +windjoin (query results .*)$", proc.stderr, re.MULTILINE).group(1).split()
        shown = subprocess.run(
            [sys.executable, "-m", "windjoin.pipelines", *query, "--json"], capture_output=True, text=True, timeout=120
        )
    finally:
        services.down(tmp_path / "services")
    assert re.search(r"batch \d+: [\d,]+ records, [\d,]+ pairs .*delay p50", proc.stderr)
    total = re.search(r"([\d,]+) records joined into ([\d,]+) pairs", proc.stderr)
    records, pairs = (int(g.replace(",", "")) for g in total.groups())
    assert records > 3000 and pairs > 0
    stored = sum(
        ds.dataset(tmp_path / "parquet" / f"task={task}", partitioning="hive").count_rows()
        for task in ("same_user", "same_user_near_price")
    )
    assert stored == pairs  # every reported pair is in Parquet, once
    assert re.search(r"delay: +p50 [\d.]+ s, p99 [\d.]+ s, worst batch's p99 [\d.]+ s", proc.stderr)
    assert re.search(r"budget: +median batch [\d.]+ s = read [\d.]+ \+ adapt", proc.stderr)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert len(shown.stdout.splitlines()) == min(10, pairs)  # the pointed-at command reads the demo's results
