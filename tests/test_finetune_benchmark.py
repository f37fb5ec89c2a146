"""benchmarks.finetune runs end to end quickly: pairs equal the uncontrolled run's, fine tuning makes and moves
mini-groups, the adaptive degree of declustering follows the load, and both plots are written."""

from __future__ import annotations

from tests.benchmark_runs import run_benchmark


def test_finetune_benchmark_quick_run(tmp_path):
    out = tmp_path / "finetune.json"
    # a pair mismatch against the uncontrolled run exits non-zero
    result, _ = run_benchmark("finetune", out, "--quick", timeout=300)
    for row in result["fig7_8"]["rows"]:
        assert row["static"]["pairs"] == row["whole"]["pairs"] == row["fine"]["pairs"] > 0
        assert row["static"]["checksum"] == row["whole"]["checksum"] == row["fine"]["checksum"]
        assert row["whole"]["max_mini_groups"] == 0
    hottest = result["fig7_8"]["rows"][-1]["fine"]
    assert hottest["max_mini_groups"] > 0 and hottest["moves"] > 0
    runs = result["fig11"]["runs"]
    assert runs["fixed"]["pairs"] == runs["adaptive"]["pairs"]
    assert set(runs["fixed"]["slots"]) == {result["params"]["max_slots"]}
    assert len(set(runs["adaptive"]["slots"])) > 1  # the slot count changed with the load
    assert runs["adaptive"]["slot_seconds_used"] < runs["fixed"]["slot_seconds_used"]
    assert result["machine"]["cores"]
    for name in ("finetune_fig7_8.png", "finetune_fig11.png"):
        assert (tmp_path / name).stat().st_size > 0
