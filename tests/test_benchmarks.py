"""The benchmarks run end to end and write their results files (smoke runs, not performance checks)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark


@pytest.mark.slow
def test_kernels_benchmark_quick_run(tmp_path):
    out = tmp_path / "kernels.json"
    result, _ = run_benchmark("kernels", out, "--quick", "--seconds", "0.3", timeout=300)
    assert [r["window_per_stream"] for r in result["rows"]] == [1 << 16, 1 << 18]
    for row in result["rows"]:
        assert row["indexed"]["tuples_per_s"] > 0 and row["nested_loop"]["comparisons_per_s"] > 0
        assert row["indexed"]["efficiency_P"] > row["nested_loop"]["efficiency_P"]
    assert result["machine"]["cpu_model"]
    assert (tmp_path / "kernels-wide-block.json").exists()  # beside --out, not over the committed results


@pytest.mark.slow
def test_output_path_benchmark_quick_run(tmp_path):
    out = tmp_path / "output_path.json"
    result, printed = run_benchmark("output_path", out, "--quick", timeout=300)
    assert list(result["phases"]) == ["floor", "parquet", "redis", "both", "pairs_redis", "pairs_both"]
    for run in result["phases"].values():  # every batch staged by both slots and committed (else the run fails)
        assert run["pairs"] == 3 * 40_000 and run["pairs_per_s"] > 0
    assert result["phases"]["both"]["redis_bytes_per_pair"] < result["phases"]["pairs_both"]["redis_bytes_per_pair"]
    assert "both_sinks_at_least_1m_pairs_per_s" in result["targets"] and "floor" in printed
    kafka = result["kafka"]["phases"]  # the Kafka sink and the bare producer, on the section's own broker
    assert list(kafka) == ["kafka_floor", "kafka"] and all(
        r["rows"] == 3 * 40_000 and r["rows_per_s"] > 0 for r in kafka.values()
    )
    assert "kafka_sink_at_least_500k_rows_per_s" in result["targets"] and "Kafka sink / bare producer" in printed


@pytest.mark.slow
def test_latency_benchmark_quick_run(tmp_path):
    out = tmp_path / "pipeline.json"
    out.write_text('{"benchmark": "pipeline"}')  # the latency key joins the pipeline results, which stay
    short = ["--seconds", "4", "--warmup", "1", "--floor-seconds", "2"]  # a smoke run: every phase, briefly
    peers = {"rocksdb_v4", "hdfs_v2+spark_kafka"}  # both configurations and both readers (of the four peers)
    result, _ = run_benchmark("latency", out, "--quick", *short, "--peers", ",".join(sorted(peers)), timeout=900)
    latency = result["latency"]
    assert result["benchmark"] == "pipeline"
    assert latency["floor"]["stateful"]["batch_ms_median"] > latency["floor"]["noop"]["batch_ms_median"] > 0
    for run in latency["runs"].values():  # the real output path: pairs reached Redis and Parquet, delays known
        assert run["batches"] > 0 and run["delay_to_commit"]["pairs"] > 0
        assert run["delay_to_commit"]["p99_ms"] >= run["delay_to_emit"]["p99_ms"] > 0
        assert set(run["budget_ms_median"]) >= {"read", "adapt", "join", "sink_stage", "spark", "plan", "commit"}
    assert set(latency["builtin"]) == peers
    for name, run in latency["builtin"].items():  # the peer at the same rate, both configurations in effect
        assert run["evidence"]["in_effect"] and run["delay_to_commit"]["pairs"] > 0, name
        assert run["batch_ms_median"] > 0 and isinstance(run["void"], bool)
    assert latency["baseline"]["builtin_config"] in latency["builtin"]
    assert set(latency["targets"]) == {
        "p99_delay_at_most_1s_at_paper_rate",
        "fixed_cost_at_most_0_6s",
        "batch_time_over_floor",
        "batch_time_over_pieces_floor",
        "floor_p99_delay_ms",
        "p99_delay_over_floor_p99",
    }
    assert latency["floor"]["pieces"]["batch_ms_median"] > 0  # the job's own shape with nothing in it, same run
    # the floor of delay to commit: events arriving evenly behind the trivial query's batches
    pieces = latency["floor"]["pieces"]
    assert pieces["delay_to_commit_uniform"]["p99_ms"] > pieces["batch_ms_median"]
    for run in latency["runs"].values():  # the same model on the job's own batches
        assert run["delay_to_commit_uniform"]["pairs"] > 0


def test_evenly_arriving_events_wait_for_the_end_of_the_batch_after_their_cut():
    """Batches back to back, each 500 ms with its offsets fixed 100 ms in: an event arriving between two cuts waits
    for the later batch's end, from 401 ms (1 ms before its cut) to 900 ms (just after the previous cut)."""
    from benchmarks.delays import uniform_arrival_delays

    def report(batch_id: int) -> dict:
        start = f"2026-11-29T10:00:{batch_id // 2:02d}.{(batch_id % 2) * 500:03d}Z"
        return {"batchId": batch_id, "timestamp": start, "durationMs": {"latestOffset": 100, "triggerExecution": 500}}

    delays = uniform_arrival_delays([report(b) for b in (3, 0, 2, 1)]).summary()  # in any order
    assert delays["pairs"] == 3 * 500  # one event a ms between the first cut and the last
    assert delays["p50_ms"] == 650 and delays["p99_ms"] == 895 and delays["max_ms"] == 900
