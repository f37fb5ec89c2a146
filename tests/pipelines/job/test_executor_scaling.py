"""Executor scaling on a real Spark standalone cluster (a Master and two Workers on loopback, from pyspark's
`bin/spark-class`): `windjoin run` follows the desired executor count of the controller's latest decision in
Redis (its `slots`, recorded through the controller's DecisionStore); executors come and go as the master sees
them while events arrive in waves; the Parquet results equal the oracle (no lost, no duplicated pair). The
driver runs in its own process (`python -m windjoin.pipelines run`), so that this test does not touch the
session's local SparkSession.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from tests.support.executor_scaling import ExecutorWatch, joined, scaling_events, wait
from windjoin.connectors.files.parquet_sink import ParquetSink
from windjoin.connectors.local import processes
from windjoin.connectors.redis.client import redis_client
from windjoin.connectors.redis.control_decisions import DecisionStore, decision_key
from windjoin.connectors.spark.cluster import ClusterConfig, ClusterStartError, StandaloneCluster, start_cluster
from windjoin.operators.testing.oracle import as_multiset, oracle_join


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    try:
        started = start_cluster(ClusterConfig(state_dir=tmp_path_factory.mktemp("spark-cluster")))
    except ClusterStartError as err:
        pytest.skip(f"the Spark standalone cluster did not start: {err}")
    try:
        yield started
    finally:
        started.stop()


def _start_run(
    spec_path: Path,
    bootstrap: str,
    cluster: StandaloneCluster,
    redis_url: str,
    key: str,
    log: Path,
    routing: bool = False,
) -> int:
    """`windjoin run` on the cluster, following the desired executor count at `key` (no hysteresis), and with
    `routing` the controller's partition moves too (its slots); its PID."""
    argv = [
        sys.executable, "-m", "windjoin.pipelines", "run", str(spec_path), "--bootstrap", bootstrap,
        "--spark-master", cluster.master_url, "--executors-from-redis", redis_url, "--executors-key", key,
        "--executors-hold", "0", "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.executor.cores=1",
        *(("--control-redis", redis_url) if routing else ()),
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return processes.spawn(argv, log, cwd=spec_path.parent, env=env)


@pytest.mark.slow
def test_executors_follow_the_desired_count_without_losing_pairs(
    cluster, kafka_bootstrap, redis_url, unique_topic, tmp_path
):
    spec = keyed_eq_spec(unique_topic, tmp_path)
    spec.update(trigger_ms=500, max_offsets_per_trigger=300, sinks={"parquet": {"path": str(tmp_path / "parquet")}})
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML
    namespace = f"t{uuid.uuid4().hex[:8]}"
    key, decisions = decision_key(namespace), DecisionStore(redis_url, namespace)
    epoch = iter(range(1, 100))

    def decide(slots: int) -> None:  # as the controller records an epoch's decision (only the fields used here)
        decisions.record({"epoch": next(epoch), "slots": slots})

    decide(1)

    rng, events = random.Random(5), []
    produce_events(kafka_bootstrap, spec, [])  # the topics exist before the job reads them
    log = tmp_path / "driver.log"
    watch = ExecutorWatch(cluster)
    driver = _start_run(spec_path, kafka_bootstrap, cluster, redis_url, key, log)
    sink = ParquetSink(tmp_path / "parquet")
    timings = {}

    def wave(n: int) -> None:
        new = scaling_events(len(events), n, rng)
        events.extend(new)
        produce_events(kafka_bootstrap, spec, new)

    def all_joined() -> bool:
        return joined(sink, spec, events)

    try:
        timings["start: 1 executor"] = wait(
            "the job holding 1 executor", lambda: watch.now == 1 and "executors: target 1" in log.read_text(), 120, log
        )
        wave(1500)
        timings["wave 1 joined"] = wait("wave 1 joined", all_joined, 90, log)
        decide(2)  # grow while the next wave is processed
        asked = time.monotonic()
        wave(1500)
        timings["grown to 2"] = wait("a second executor", lambda: watch.now == 2, 60, log, since=asked)
        timings["wave 2 joined"] = wait("wave 2 joined", all_joined, 90, log)
        decide(1)  # shrink while the next wave is processed
        asked = time.monotonic()
        wave(1500)
        timings["shrunk to 1"] = wait("back to one executor", lambda: watch.now == 1, 60, log, since=asked)
        wave(1500)
        timings["waves 3-4 joined"] = wait("waves 3 and 4 joined", all_joined, 120, log)
    finally:
        watch.stop()  # before the driver: its executors go when it stops, which is not a scaling step
        processes.stop(driver, grace_s=10.0)
        decisions.close()
    print("seconds:", timings, "executors seen by the master:", watch.changes)

    # The master saw executors come and go: one, then two, then one again (before it: 0, or the two a new
    # application first gets from a standalone master).
    assert watch.changes[-3:] == [1, 2, 1], watch.changes
    # ... and the job kept committing batches while it ran on two executors, and after one was taken away.
    lines = log.read_text(errors="replace").replace("\r", "\n").splitlines()
    steps = [i for i, line in enumerate(lines) if line.startswith("executors: target")]
    grown = next(i for i in steps if lines[i].startswith("executors: target 2"))
    shrunk = next(i for i in steps if i > grown and lines[i].startswith("executors: target 1"))
    assert any(line.startswith("batch ") for line in lines[grown:shrunk]), lines[grown:shrunk]
    assert any(line.startswith("batch ") for line in lines[shrunk:]), lines[shrunk:]
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 5000
    assert as_multiset(parquet_pairs(sink, spec)) == as_multiset(expected)


# The controller's rule under test, paper 000's declustering, with the load that drives it: a slot is a supplier
# when its input buffer is over th_sup full, a consumer under th_con; N_sup > beta * N_con grows, no supplier for 3
# epochs in a row shrinks. The buffer is the topics: each batch reports the records left waiting when it was
# planned, each slot's share by its tuples, over a capacity of 300 (occupancy "backlog", the paper's own measure).
# A wave of 2000 rows read 700 a batch leaves 1300, then 600 waiting (4.3 and 2 capacities in two batches of an
# epoch of ~6: a supplier however the epochs fall); a trickle leaves none. (Busy occupancy, a slot's seconds over
# the batch interval, sees little of a lag: most of a batch's time is Spark's, outside the slots, and its
# thresholds had to be set to this machine's readings.) The job follows the slots too: a shrink drains slot 1 onto
# slot 0; a growth moves partitions to slot 1 from the next epoch on, while the load lasts (a wave is over by then).
# (Relative occupancies, share/cpu/tuples, cannot drive the rule: one slot holds all of the share, 1 > th_sup, so
# it never shrinks to one slot.) S2J's utilisation rule runs the same loop in test_worker_cut_off (growing under
# load, with a worker cut off) and decides from real load reports in tests/pipelines/controller.
DECLUSTERING = {
    "scaling": "declustering",
    "declustering": {"beta": 0.5, "min_slots": 1, "max_slots": 2},
    "reorganisation": {"occupancy": "backlog", "backlog_capacity": 300, "th_sup": 0.3, "th_con": 0.1},
}


@pytest.mark.slow
def test_executors_follow_the_controller_on_load(cluster, kafka_bootstrap, redis_url, unique_topic, tmp_path):
    """The whole loop: `windjoin run` publishes its batches' load, `windjoin controller` turns it into a slot count
    (paper 000's supplier/consumer declustering rule), the driver follows it: busy waves keep two executors, a
    trickle releases one, the next wave takes it back. Redis database 12 is this test's own (the load reports and
    the decisions use the default namespace)."""
    url = redis_url.rsplit("/", 1)[0] + "/12"
    redis_client(url).flushdb()
    spec = keyed_eq_spec(unique_topic, tmp_path)
    parquet = {"path": str(tmp_path / "parquet")}
    spec.update(trigger_ms=500, max_offsets_per_trigger=700, sinks={"parquet": parquet, "redis": {"url": url}})
    spec["window"]["size_ms"] = 2000
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    control = tmp_path / "control.yaml"
    control.write_text(json.dumps(DECLUSTERING))
    rng, events, lock = random.Random(6), [], threading.Lock()
    produce_events(kafka_bootstrap, spec, [])
    log, control_log = tmp_path / "driver.log", tmp_path / "controller.log"
    watch = ExecutorWatch(cluster)
    driver = _start_run(spec_path, kafka_bootstrap, cluster, url, decision_key(), log, routing=True)
    controller_argv = [sys.executable, "-m", "windjoin.pipelines", "controller", str(spec_path), "--config"]
    controller = processes.spawn([*controller_argv, str(control), "--epoch-s", "3"], control_log, cwd=tmp_path)
    sink = ParquetSink(tmp_path / "parquet")
    trickling = threading.Event()
    timings = {}

    def produce(n: int) -> None:
        with lock:
            new = scaling_events(len(events), n, rng)
            events.extend(new)
            produce_events(kafka_bootstrap, spec, new)

    def trickle() -> None:
        while trickling.is_set():
            produce(4)
            time.sleep(0.5)

    def low_load(what: str) -> float:
        trickling.set()
        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            return wait(what, lambda: watch.now == 1, 90, control_log)
        finally:
            trickling.clear()
            thread.join()

    try:
        timings["start: 2 executors"] = wait("the job on 2 executors", lambda: watch.now == 2, 120, log)
        produce(2000)
        timings["wave 1 joined"] = wait("wave 1 joined", lambda: joined(sink, spec, events), 120, log)
        timings["trickle: down to 1"] = low_load("one executor released under a trickle")
        produce(2000)
        timings["wave 2: up to 2"] = wait("a second executor for wave 2", lambda: watch.now == 2, 90, control_log)
        timings["wave 2 joined"] = wait("wave 2 joined", lambda: joined(sink, spec, events), 120, log)
        timings["trickle: down to 1 again"] = low_load("one executor released again")
        timings["all joined"] = wait("all events joined", lambda: joined(sink, spec, events), 90, log)
    finally:
        trickling.clear()
        watch.stop()  # before the driver: its executors go when it stops, which is not a scaling step
        processes.stop(controller, grace_s=5.0)
        processes.stop(driver, grace_s=10.0)
    print("seconds:", timings, "executors seen by the master:", watch.changes)
    print(processes.log_tail(control_log, 30))

    assert watch.changes[-4:] == [2, 1, 2, 1], watch.changes
    # the rule decided both ways: grown with a supplier, shrunk with none
    epochs = [line for line in control_log.read_text().splitlines() if line.startswith("epoch ")]
    assert any(re.search(r"suppliers \[\d.*, slots 2,", line) for line in epochs), epochs
    assert any("suppliers []" in line and ", slots 1," in line for line in epochs), epochs
    # ... and the job followed the slots: the shrink from the spec's two drained slot 1 (its window state moved)
    assert any(re.search(r"moves p\d+ 1->0.*, slots 1,", line) for line in epochs), epochs
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 5000
    assert as_multiset(parquet_pairs(sink, spec)) == as_multiset(expected)
