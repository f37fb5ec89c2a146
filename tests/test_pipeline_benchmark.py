"""The pipeline benchmark runs end to end (--quick, tiny) and writes both systems' figures (a smoke run)."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_benchmark

# Both of Spark's configurations and both readers, in two peers: a smoke run's share of the four (each code path)
PEERS = {"rocksdb_v4", "hdfs_v2+spark_kafka"}


@pytest.mark.slow
def test_pipeline_benchmark_quick_run(tmp_path):
    out = tmp_path / "pipeline.json"
    tiny = {
        "--prefill-events": "30000",
        "--prefill-rate": "6000",
        "--window-s": "1",
        "--keys": "1000",  # a small domain, so that a 3 s paced run surely has pairs
        "--max-offsets": "10000",
        "--sweep-offsets": "10000",
        "--stage-batches": "2",
        "--paced-seconds": "3",
        "--paced-warmup-s": "1",
        "--catchup-events": "10000",
        "--floor-seconds": "2",
        "--peers": ",".join(sorted(PEERS)),
    }
    args = [arg for pair in tiny.items() for arg in pair]
    result, _ = run_benchmark("pipeline", out, "--quick", *args, timeout=900)
    assert result["machine"]["cpu_model"] and result["date"]
    for system in ("windjoin", "builtin"):
        assert result[system]["throughput"]["rows_per_s"] > 0
        paced = result[system]["paced"]
        assert paced["produced"] > 0 and paced["pairs"] > 0
        assert paced["delay_sink"]["p99_ms"] is not None
        assert "p99_s" in paced["generator_lag"] and isinstance(paced["void"], bool)  # the load's own lag judged
    # the built-in join in both of its configurations, each shown to be in effect; the faster is the baseline
    configs = result["builtin_configs"]
    assert set(configs) == PEERS
    for name, run in configs.items():
        assert run["throughput"]["rows_per_s"] > 0 and all(row["evidence"]["in_effect"] for row in run["sweep"]), name
    assert result["builtin"]["config"] == max(configs, key=lambda c: configs[c]["throughput"]["rows_per_s"])
    assert result["builtin"]["paced_at_builtin_rate"]["config"] == result["builtin"]["config"]
    assert result["windjoin"]["paced_at_builtin_rate"]["rate"] == result["builtin"]["paced_at_builtin_rate"]["rate"]
    assert result["windjoin"]["paced"]["delay_emitted"]["p50_ms"] is not None
    assert result["ratio_throughput"] > 0
    outer = result["left_outer"]  # a left outer task beside the built-in's left outer join, same topics
    assert outer["windjoin"]["rows_per_s"] > 0 and outer["windjoin"]["pairs"] > 0
    assert set(outer["builtin_configs"]) == PEERS and outer["ratio_throughput"] > 0
    assert all(run["evidence"]["in_effect"] for run in outer["builtin_configs"].values())
    for kind in ("noop", "stateful"):  # Spark's own floor at the job's batch size, same run
        assert result["floor"][kind]["batches"] > 0 and result["floor"][kind]["rows_per_s"] > 0
    catch_up = result["catch_up"]  # a backlog drained at the spec's defaults, nothing late
    assert catch_up["drained"] and catch_up["rows"] == catch_up["backlog_rows"] > 0 and catch_up["late"] == 0
    assert catch_up["rows_per_s"] > 0 and catch_up["driver_rss_mb_first_half_max"] > 0
    assert set(result["targets"]) == {
        "windjoin_at_least_3x_builtin_throughput",
        "batch_over_floor",
        "batch_at_most_1_5x_floor",
        "windjoin_p99_delay_under_2s_at_80pct",
    }
    assert result["targets"]["batch_over_floor"] > 0  # the steady batch and the floor's, same rows, same run


def test_records_read_come_from_the_sources_offsets():
    """windjoin's reader hands Spark a few Arrow pieces a batch: rows/s are counted in Kafka records read."""
    from benchmarks.pipeline import records_read

    first = {"startOffset": None, "endOffset": {"partitions": {"r:0": 10, "r:1": 5}, "control": {}}}
    later = {
        "startOffset": '{"partitions": {"r:0": 10, "r:1": 5}}',
        "endOffset": '{"partitions": {"r:0": 12, "r:1": 9}}',
    }
    assert records_read({"numInputRows": 2, "sources": [first]}) == 15
    assert records_read({"numInputRows": 2, "sources": [later, first]}) == 6 + 15  # the built-in join's two sources
    assert records_read({"numInputRows": 7, "sources": [{"startOffset": None, "endOffset": {"0": 7}}]}) is None


def test_spark_runs_below_the_generator():
    """Every thread of the JVM's process tree and of the driver process but its main thread is lowered; the main
    thread, which starts the generators, keeps its priority. In a process of its own: the driver's threads stay
    lowered."""
    script = """
import json, os, subprocess, sys, threading, time, types
from benchmarks.spark_priority import lower_spark_priority
nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
base = nice(0)
jvm = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '30'])"],
                       stdout=subprocess.DEVNULL, start_new_session=True)
time.sleep(1)  # the "JVM" has started its "worker"
stop = threading.Event()
helper = threading.Thread(target=stop.wait)
helper.start()
spark = types.SimpleNamespace(sparkContext=types.SimpleNamespace(_gateway=types.SimpleNamespace(proc=jvm)))
target = min(base + 3, 19)
lowered = lower_spark_priority(spark, nice=target)
tree = [jvm.pid] + [int(p) for p in open(f"/proc/{jvm.pid}/task/{jvm.pid}/children").read().split()]
print(json.dumps({"base": base, "target": target, "lowered": lowered, "tree": [nice(p) for p in tree],
                  "helper": nice(helper.native_id), "main": nice(threading.main_thread().native_id),
                  "idle": [os.sched_getscheduler(p) == os.SCHED_IDLE for p in tree + [helper.native_id]],
                  "main_idle": os.sched_getscheduler(threading.main_thread().native_id) == os.SCHED_IDLE,
                  "again": lower_spark_priority(spark, nice=target)}))
stop.set()
os.killpg(jvm.pid, 9)
"""
    import json
    import subprocess
    import sys

    out = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True).stdout)
    if out["base"] >= 19:
        pytest.skip("running at the lowest priority already: nothing can be lowered")
    target = out["target"]
    assert out["tree"] == [target, target] and out["helper"] == target and out["main"] == out["base"]
    assert out["lowered"] >= 3 and out["again"] == 0  # the JVM, its worker, the helper; then nothing left
    assert all(out["idle"]) and not out["main_idle"]  # in the idle scheduling class, the main thread not


def test_peers_are_every_configuration_or_the_named_ones():
    from benchmarks.builtin_peer import peers

    every = peers()
    assert {"hdfs_v2", "rocksdb_v4"} <= set(every) and peers("rocksdb_v4") == ["rocksdb_v4"]
    with pytest.raises(ValueError, match=r"--peers: \['nope'\] are not peers here; accepted: hdfs_v2, rocksdb_v4"):
        peers("rocksdb_v4,nope")
