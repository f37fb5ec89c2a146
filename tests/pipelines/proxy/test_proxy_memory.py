"""A one-time query over a 1.5M-row Parquet history keeps one page in memory: `windjoin proxy` in its own process,
its peak resident set (VmHWM, reset through /proc/PID/clear_refs just before a query) against its resident set
before it, while it answers limit=10000 over the whole history (result times random over the span in every batch,
so no row group can be skipped: the worst case). The rows are checked against a brute-force oracle of their keys.

What is measured, honestly: the first 10000-row page a proxy process serves raises its RSS by about 40 MB (35-50
MB seen on a loaded 2-core machine) whatever the history (the same over 20k rows: building, encoding and sending
a page, and the allocators growing once); the previous code's rose by ~335 MB over this history. So the test
measures the history's part: a 10000-row page over a span holding only ~10000 rows first (the page's own cost,
reported), then the page over the whole 1.5M-row history, which must raise the peak by less than 50 MB.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np

from tests.pipelines.proxy_helpers import AUTH, ProxyProcess, make_spec
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.files.snapshots import SnapshotStore
from windjoin.operators.result_table import table_from_columns

BATCHES, ROWS = 150, 10_000
SPAN_MS = 10**9
LIMIT = 10_000
MB = 1024 * 1024


def test_a_large_page_over_a_large_history_keeps_one_page(tmp_path: Path) -> None:
    folder = tmp_path / "parquet"
    spec = make_spec(None, folder)
    sink = ParquetSink(folder)
    rng = np.random.default_rng(5)
    keys = []
    for b in range(BATCHES):
        ts = rng.integers(0, SPAN_MS, ROWS)
        k = rng.integers(0, 100, ROWS)
        sides = {
            "R": {"ts": ts, "k": k, "x": rng.random(ROWS), "z": np.full(ROWS, "some text of a result row")},
            "S": {"t": ts - 7, "k": k, "d": k % 2 == 0},
        }
        sink.write(b, {"a": table_from_columns(spec, "a", sides, b, 1)})
        order = np.lexsort((np.arange(ROWS), ts))[:LIMIT]
        keys += [(int(ts[i]), b, int(i)) for i in order]
        keys = sorted(keys)[:LIMIT]
    assert SnapshotStore(folder).commit("a", BATCHES - 1, "periodic", 1) is not None
    with ProxyProcess(spec, tmp_path, ["--query-budget-ms", "600000"]) as proxy:
        url = f"{proxy.url}/v1/tasks/a/results"
        with httpx.Client(headers=AUTH, timeout=300) as client:
            warm = client.get(url, params={"from": 0, "to": 0, "limit": 10})  # imports and code paths, no data
            assert warm.status_code == 200, warm.text
            fresh = proxy.status("VmRSS")
            proxy.reset_peak()
            small = client.get(url, params={"from": 0, "to": SPAN_MS // BATCHES, "limit": LIMIT})  # ~10k rows
            assert small.status_code == 200 and len(small.json()["rows"]) > LIMIT // 2
            page_cost = proxy.status("VmHWM") - fresh
            before = proxy.status("VmRSS")
            proxy.reset_peak()
            started = time.monotonic()
            page = client.get(url, params={"from": 0, "to": SPAN_MS, "limit": LIMIT})
            took = time.monotonic() - started
            peak = proxy.status("VmHWM")
        assert page.status_code == 200, page.text
        rows = page.json()["rows"]
        assert [(r["result_time"], r["batch_id"], r["row"]) for r in rows] == keys
        assert rows[0]["R"]["z"] == "some text of a result row" and set(rows[0]) == {
            "R",
            "S",
            "batch_id",
            "row",
            "emitted_at",
            "result_time",
        }
        print(
            f"RSS {fresh / MB:.0f} MB; a first page over ~10k rows: +{page_cost / MB:.0f} MB; then the page over the "
            f"history: {before / MB:.0f} -> peak {peak / MB:.0f} MB, query {took:.1f} s"
        )
        assert peak - before < 50 * MB, (before / MB, peak / MB)
