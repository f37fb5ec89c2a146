"""A fault a cluster really meets: one Spark worker cut off the network mid-run while the controller scales.

Each standalone Worker runs in its own network namespace (a veth pair to a bridge in the root namespace; see
bridged_namespaces), the Master, the broker, Redis and the driver listen on the bridge's address. The job runs
following `windjoin controller`'s executor count while events keep arriving; after some batches one worker's
link goes down with a batch in flight. Spark must notice the lost executor (heartbeat timeout), rerun its tasks
on the other worker and go on; all results must equal the oracle. The test prints how long the batch in flight
took to commit after the cut, with the timeouts that bound it.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipelines.job.bridged_namespaces import BridgedNamespaces, NamespacesUnavailable, bridged_namespaces
from tests.pipelines.job.test_executor_scaling import ExecutorWatch, _events, _joined, _wait
from tests.pipelines.pipeline_helpers import keyed_eq_spec, parquet_pairs, produce_events
from windjoin.connectors import processes, services
from windjoin.connectors.parquet_sink import ParquetSink
from windjoin.connectors.spark_cluster import ClusterConfig, ClusterStartError, StandaloneCluster, start_cluster
from windjoin.operators.testing.oracle import as_multiset, oracle_join

# How fast a cut-off worker is noticed: the driver drops an executor after NETWORK_TIMEOUT without a heartbeat
# (checked every TIMEOUT_INTERVAL), the master drops the worker after WORKER_TIMEOUT s (so that it launches no
# replacement executor there).
HEARTBEAT, NETWORK_TIMEOUT, TIMEOUT_INTERVAL, WORKER_TIMEOUT = "1s", "8s", "1s", "6"
BATCH_LINE = re.compile(r"^batch (\d+): ", re.MULTILINE)


@pytest.fixture(scope="module")
def net() -> Iterator[BridgedNamespaces]:
    try:
        with bridged_namespaces(2) as made:
            yield made
    except NamespacesUnavailable as err:
        pytest.skip(f"no network namespaces: {err}")


@pytest.fixture(scope="module")
def bridged_services(net, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The embedded broker and Redis on the bridge's address (the workers reach nothing else): (bootstrap, url)."""
    state_dir = tmp_path_factory.mktemp("bridged-services")
    try:
        started = {s.service.name: s.service for s in services.up(services.ServicesConfig(state_dir, host=net.host_ip))}
    except services.ServiceStartError as err:
        services.down(state_dir)
        pytest.skip(f"the services did not start on {net.host_ip}: {err}")
    try:
        yield started[services.KAFKA].url, started[services.REDIS].url
    finally:
        services.down(state_dir)


@pytest.fixture(scope="module")
def cluster(net, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    config = ClusterConfig(
        state_dir=tmp_path_factory.mktemp("spark-cluster-netns"),
        host=net.host_ip,
        worker_hosts=net.ips,
        worker_prefixes=tuple(net.prefix(i) for i in range(len(net.names))),
        daemon_conf={"spark.worker.timeout": WORKER_TIMEOUT},
    )
    try:
        started = start_cluster(config)
    except ClusterStartError as err:
        pytest.skip(f"the Spark standalone cluster did not start in namespaces: {err}")
    try:
        yield started
    finally:
        started.stop()


def _batches(log: Path) -> list[int]:
    return [int(b) for b in BATCH_LINE.findall(log.read_text(errors="replace").replace("\r", "\n"))]


@pytest.mark.slow
def test_job_recovers_when_a_worker_is_cut_off(net, bridged_services, cluster, unique_topic, tmp_path, record_property):
    bootstrap, url = bridged_services
    spec = keyed_eq_spec(unique_topic, tmp_path)
    spec.update(
        trigger_ms=500,
        max_offsets_per_trigger=300,
        sinks={"parquet": {"path": str(tmp_path / "parquet")}, "redis": {"url": url}},
    )
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(json.dumps(spec))
    control = tmp_path / "control.yaml"  # tau = tuples per batch per slot / 100: a steady 150/s keeps two slots busy
    control.write_text(
        json.dumps({"scaling": "utilisation", "utilisation": {"capacity": 100, "sustain_epochs": 1, "max_workers": 2}})
    )
    rng, events, lock = random.Random(22), [], threading.Lock()
    produce_events(bootstrap, spec, [])
    log, control_log = tmp_path / "driver.log", tmp_path / "controller.log"
    ip = net.host_ip
    argv = [
        sys.executable, "-m", "windjoin.pipelines", "run", str(spec_path), "--bootstrap", bootstrap,
        "--spark-master", cluster.master_url, "--executors-from-redis", url, "--executors-hold", "0",
        "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.executor.cores=1",
        "--spark-conf", f"spark.driver.host={ip}", "--spark-conf", f"spark.driver.bindAddress={ip}",
        "--spark-conf", f"spark.executor.heartbeatInterval={HEARTBEAT}",
        "--spark-conf", f"spark.network.timeout={NETWORK_TIMEOUT}",
        "--spark-conf", f"spark.network.timeoutInterval={TIMEOUT_INTERVAL}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": ip}
    watch = ExecutorWatch(cluster)
    driver = processes.spawn(argv, log, cwd=tmp_path, env=env)
    controller_argv = [sys.executable, "-m", "windjoin.pipelines", "controller", str(spec_path), "--config"]
    controller = processes.spawn([*controller_argv, str(control), "--epoch-s", "3"], control_log, cwd=tmp_path)
    sink = ParquetSink(tmp_path / "parquet")
    producing = threading.Event()
    timings: dict[str, float] = {}

    def produce(n: int) -> None:
        with lock:
            new = _events(len(events), n, rng)
            events.extend(new)
            produce_events(bootstrap, spec, new)

    def steady() -> None:
        while producing.is_set():
            produce(75)
            time.sleep(0.5)

    producer = threading.Thread(target=steady, daemon=True)
    try:
        timings["start: 2 executors"] = _wait("the job on 2 executors", lambda: watch.now == 2, 120, log)
        producing.set()
        producer.start()
        _wait("3 batches committed on 2 executors", lambda: len(_batches(log)) >= 3 and watch.now == 2, 150, log)
        in_flight = max(_batches(log)) + 1
        net.cut(1)
        cut = time.monotonic()
        timings["recovery: batch in flight at the cut committed"] = _wait(
            f"batch {in_flight} (in flight at the cut) committed", lambda: in_flight in _batches(log), 90, log, cut
        )
        _wait("3 more batches after it", lambda: max(_batches(log)) >= in_flight + 3, 60, log)
        producing.clear()
        producer.join()
        timings["all joined"] = _wait("all events joined", lambda: _joined(sink, spec, events), 90, log, cut)
    finally:
        producing.clear()
        watch.stop()
        processes.stop(controller, grace_s=5.0)
        processes.stop(driver, grace_s=10.0)
    workers = {w["host"]: w["state"] for w in cluster.status()["workers"]}
    print(
        f"seconds: {timings}; executors seen by the master: {watch.changes}; workers: {workers}; timeouts: "
        f"heartbeat {HEARTBEAT}, spark.network.timeout {NETWORK_TIMEOUT} (checked every {TIMEOUT_INTERVAL}), "
        f"spark.worker.timeout {WORKER_TIMEOUT} s"
    )
    print(processes.log_tail(log, 40))
    record_property("recovery_s", round(timings["recovery: batch in flight at the cut committed"], 1))

    # The cut cost the job the executor on the cut worker (noticed by its missing heartbeats), not the other one.
    lost = re.findall(r"Lost executor \S+ on (\S+): (.*)", log.read_text(errors="replace"))
    assert [host for host, _ in lost] == [net.ips[1]], lost
    assert workers[net.ips[1]] == "DEAD" and workers[net.ips[0]] == "ALIVE", workers
    expected, late = oracle_join(spec, events)
    assert not late and len(expected) > 1000
    assert as_multiset(parquet_pairs(sink, spec)) == as_multiset(expected)
