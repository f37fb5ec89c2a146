"""The S2J benchmark's smoke run: indexes beat pairwise on P, shared tasks read the input once and agree on results."""

from __future__ import annotations

from tests.benchmark_runs import run_benchmark


def test_s2j_benchmark_quick_run(tmp_path):
    out = tmp_path / "s2j.json"
    result, _ = run_benchmark("s2j", out, "--quick", timeout=120)
    assert (tmp_path / "s2j.png").stat().st_size > 0
    assert result["machine"]["cpu_model"]
    assert len(result["efficiency"]) == 2
    for row in result["efficiency"]:
        assert row["indexed"]["efficiency_P"] > 100 * row["nested_loop"]["efficiency_P"]
        assert row["indexed"]["tuples_per_s"] > 0 and row["nested_loop"]["tuples_per_s"] > 0
    rows = {row["tasks"]: row for row in result["concurrency"]}
    assert sorted(rows) == [1, 2, 4, 8]
    file_bytes = result["input_file_bytes"]
    for n, row in rows.items():
        shared, separate = row["shared"], row["separate"]
        assert set(shared["results"]) == set(row["task_names"]) and len(row["task_names"]) == n
        assert shared["results"] == separate["results"]
        assert sum(shared["results"].values()) > 0
        assert file_bytes <= shared["bytes_read"] < 1.1 * file_bytes  # the file, read once
        assert n * file_bytes <= separate["bytes_read"] < 1.1 * n * file_bytes  # read once per task
        assert shared["result_bytes"] == separate["result_bytes"]
    assert rows[8]["shared"]["bytes_read"] < rows[8]["separate"]["bytes_read"] / 4
